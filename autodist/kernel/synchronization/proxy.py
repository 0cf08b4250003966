"""Local proxies of parameter-server variables (``PSSynchronizer.local_replication``).

The node keeps its own copy of the variable on its first replica device; the
replicas' forward reads go to the copy instead of across the network, and the
copy is refreshed from the server once the step's update is visible here:

    W (server) --read--> AutoDist-Proxy/W/proxy  <--reads-- replicas' forward pass
                 ^ refreshed after the update (and filled at initialization)

Updates still go to the server variable. A node whose replicas are CPU devices
reads a ``W`` it holds itself directly: a copy in the same memory would cost a
read and a write of the whole variable per step and spare no message (GPU
replicas keep theirs: it spares a host-to-device copy per read). The proxy's
name is ``names.proxy_name(W)``; checkpoint restores refresh it by that name.
"""
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.ops import gen_resource_variable_ops

from autodist.kernel.device import is_cpu_device
from autodist.kernel.names import PROXY_HANDLE, proxy_scope, task_of

__all__ = ["add_proxies"]


def _forward_reads(assignment, var_op):
    """(consumer op, input index) of reads of ``var_op``'s handle outside apply and creation ops."""
    facts = assignment.analysis.variables[var_op]
    handle = assignment.analysis.graph.get_tensor_by_name(facts.name)
    reads = []
    for consumer in handle.consumers():
        name = consumer.name
        if name in assignment.analysis.apply_ops or name in assignment.analysis.creation_ops:
            continue
        reads.extend((name, i) for i, t in enumerate(consumer.inputs) if t is handle)
    return reads


def add_proxies(editor, assignment, visible):
    """Add proxies for the variables that ask for one; returns (step ops, [(handle op, initializer op)])."""
    device = assignment.local[0].device
    here = assignment.node.task_index if is_cpu_device(device) else None
    proxied = [v for v in assignment.ps_vars
               if v.synchronizer.proxy and task_of(v.synchronizer.destination) != here]
    if not proxied:
        return [], []
    scratch = editor.scratch()
    refreshes, new_vars, handles = [], [], {}
    with scratch.graph.as_default():
        for var in proxied:
            facts = assignment.analysis.variables[var.op_name]
            server = var.synchronizer.destination
            with tf.name_scope(proxy_scope(var.op_name)):
                with tf.device(device):
                    handle = gen_resource_variable_ops.var_handle_op(
                        dtype=facts.dtype, shape=facts.shape, shared_name="", name=PROXY_HANDLE)
                    handle.op._set_attr("shared_name", attr_value_pb2.AttrValue(s=handle.op.name.encode()))
                source = scratch.tensor(facts.name, dtype=tf.resource, shape=[])
                with tf.device(server):
                    value = gen_resource_variable_ops.read_variable_op(source, facts.dtype, name="fill_read")
                with tf.device(device):
                    init = gen_resource_variable_ops.assign_variable_op(handle, value, name="fill")
                with tf.device(server), tf.control_dependencies([scratch.control(visible)]):
                    fresh = gen_resource_variable_ops.read_variable_op(source, facts.dtype, name="refresh_read")
                with tf.device(device):
                    refreshes.append(gen_resource_variable_ops.assign_variable_op(handle, fresh, name="refresh"))
                handles[var.op_name] = handle.name
                new_vars.append((handle.op.name, init.name))
        step = tf.group(*refreshes, name="AutoDist-Proxy/refreshed").name
    scratch.commit()
    for var in proxied:
        for consumer, index in _forward_reads(assignment, var.op_name):
            for replica in assignment.local:
                editor.set_input(replica.prefix + consumer, index, handles[var.op_name])
                editor.node(replica.prefix + consumer).device = device
    return [step], new_vars
