"""Device placement of replicated ops.

A replicated op runs on its replica's device, except:

- ops that read or write a parameter-server variable run where the variable
  lives (resource ops must sit with their resource);
- the ops that compute one parameter-server variable's update from its
  gradient (SGD's ``-lr * grad`` before a sparse ``ScatterAdd``, a Keras
  optimizer's arithmetic on its slots) run where the variable lives, as
  TensorFlow's own optimizers place them: the synchronized gradient is
  already there, and placed on the replica they would carry it to the
  replica's node and back (``ps_apply_devices``);
- ops the user pinned to a CPU, and ops with no kernel for the replica's
  device type (string ops, most of tf.data, lookup tables on GPUs), run on
  the CPU of the replica's host.
"""
import functools

import tensorflow as tf
from tensorflow.python.framework import kernels

from autodist.kernel.analysis import apply_subgraph
from autodist.kernel.walks import resource_users

__all__ = ["replica_device", "ps_apply_devices", "has_kernel", "is_cpu_device"]


@functools.lru_cache(maxsize=None)
def has_kernel(op_type, device_type):
    """Whether ``op_type`` has a kernel for ``device_type`` (True when TF registers no kernels at all)."""
    try:
        registered = kernels.get_registered_kernels_for_op(op_type).kernel
    except Exception:  # unknown op types (functions) are placed by the runtime
        return True
    if not registered:
        return True
    return any(k.device_type == device_type for k in registered)


@functools.lru_cache(maxsize=4096)
def is_cpu_device(device):
    if not device:
        return False
    try:
        return tf.DeviceSpec.from_string(device).device_type == "CPU"
    except ValueError:
        return False


@functools.lru_cache(maxsize=4096)
def _device_type(device):
    return tf.DeviceSpec.from_string(device).device_type


def replica_device(node, replica, resource_device=None):
    """The device of ``node``'s copy in ``replica`` (see the module docstring)."""
    if resource_device:
        return resource_device
    if is_cpu_device(node.device):
        return replica.host_cpu
    device_type = _device_type(replica.device)
    if device_type != "CPU" and not has_kernel(node.op, device_type):
        return replica.host_cpu
    return replica.device


def ps_apply_devices(assignment):
    """Apply op name -> the server of the parameter-server variable whose update it computes.

    Only ops that belong to the update of parameter-server variables on one
    device: an op shared with another device's variable or with an
    all-reduced one (a global-norm clip, Keras' IdentityN over every
    gradient) stays on the replica, as does an op without a kernel there.
    """
    if not assignment.ps_vars:
        return {}
    analysis = assignment.analysis
    users = resource_users(analysis.graph, analysis.apply_ops)
    owners = {}
    for var_op in sorted(assignment.vars):
        var = assignment.vars[var_op]
        device = var.synchronizer.destination if var.kind == "ps" else None
        ops, _ = apply_subgraph(analysis, var_op, users=users)
        for op in ops:
            owners.setdefault(op.name, set()).add(device)
    placed = {}
    for name, devices in owners.items():
        device = next(iter(devices))
        if len(devices) != 1 or device is None:
            continue
        if _device_type(device) == "CPU" or has_kernel(analysis.graph.get_operation_by_name(name).type,
                                                       _device_type(device)):
            placed[name] = device
    return placed
