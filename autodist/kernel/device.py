"""Device placement of replicated ops.

A replicated op runs on its replica's device, except:

- ops that read or write a parameter-server variable run where the variable
  lives (resource ops must sit with their resource);
- ops the user pinned to a CPU, and ops with no kernel for the replica's
  device type (string ops, most of tf.data, lookup tables on GPUs), run on
  the CPU of the replica's host.
"""
import functools

import tensorflow as tf
from tensorflow.python.framework import kernels

__all__ = ["replica_device", "has_kernel", "is_cpu_device"]


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
