"""Local proxies of parameter-server variables (``PSSynchronizer.local_replication``).

The node keeps its own copy of the variable on its first replica device; the
replicas' forward reads go to the copy instead of across the network, and the
copy is refreshed from the server once the step's update is visible:

    W (server) --read--> AutoDist-Proxy/W/proxy  <--reads-- replicas' forward pass
                 ^ refreshed after the update (and filled at initialization)

Who refreshes it: for a synchronous variable of a job of several nodes, the
chief, in its own step, after it applied the update and before it releases
the other nodes (``refresh_everywhere``, called by ``ps.py``): it writes every
node's copy, while those nodes wait for their token and their executors are
idle. A node that refreshed its own copy after its token would read the
server while the server's node already computes its next step, and on CPU
replicas that node's one executor thread serves the read only after its
forward and backward pass (cnn, plans with proxies: a median near one compute,
a p90 near two). Asynchronous and bounded-staleness variables, and a job of
one node, refresh their own copies after their own update.

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
from autodist.plan.names import PROXY_HANDLE, proxy_name, proxy_scope, sync_scope, task_of
from autodist.kernel.synchronization.wiring import is_global_sync

__all__ = ["add_proxies", "refreshed_by_chief", "refresh_everywhere"]


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


def _keepers(assignment, var):
    """``{task: its first replica's device}`` of the nodes that keep a proxy of ``var``: every node
    but one of CPU replicas that holds it."""
    first = {}
    for replica in assignment.replicas:
        first.setdefault(task_of(replica.device), replica.device)
    server = task_of(var.synchronizer.destination)
    return {task: device for task, device in sorted(first.items())
            if not (task == server and is_cpu_device(device))}


def refreshed_by_chief(var, assignment):
    """Whether the chief refreshes every node's proxy of ``var`` before it releases them (a
    synchronous variable of a job of several nodes)."""
    return var.synchronizer.proxy and is_global_sync(var, assignment)


def refresh_everywhere(scratch, assignment, var_ops, after):
    """On the chief: write the updated value of each of ``var_ops`` into every node's proxy, after the
    ops ``after`` (the update); returns the writes, which the release waits for."""
    writes, var_ops = [], set(var_ops)
    for var in assignment.ps_vars:
        if var.op_name not in var_ops or not refreshed_by_chief(var, assignment):
            continue
        facts = assignment.analysis.variables[var.op_name]
        source = scratch.tensor(facts.name, dtype=tf.resource, shape=[])
        with tf.name_scope(proxy_scope(var.op_name)):
            with tf.device(var.synchronizer.destination), tf.control_dependencies(after):
                fresh = gen_resource_variable_ops.read_variable_op(source, facts.dtype, name="refresh_read")
            for task, device in _keepers(assignment, var).items():
                with tf.device(device):   # the node's own proxy: its handle's shared name
                    handle = gen_resource_variable_ops.var_handle_op(
                        dtype=facts.dtype, shape=facts.shape, shared_name=proxy_name(var.op_name),
                        name="{}_of_task_{}".format(PROXY_HANDLE, task))
                    writes.append(gen_resource_variable_ops.assign_variable_op(
                        handle, fresh, name="refresh_task_{}".format(task)))
    return writes


def add_proxies(editor, assignment, visible):
    """Add proxies for the variables that ask for one; returns (step ops, [(handle op, initializer op)]).

    ``visible``: the op after which this node sees the step's update (it refreshes the proxies the
    chief does not, ``refreshed_by_chief``)."""
    device = assignment.local[0].device
    here = assignment.node.task_index
    proxied = [v for v in assignment.ps_vars if v.synchronizer.proxy and here in _keepers(assignment, v)]
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
                    # the chief's refresh (``refresh_everywhere``) names the same resource
                    handle.op._set_attr("shared_name", attr_value_pb2.AttrValue(s=proxy_name(var.op_name).encode()))
                source = scratch.tensor(facts.name, dtype=tf.resource, shape=[])
                with tf.device(server):
                    value = gen_resource_variable_ops.read_variable_op(source, facts.dtype, name="fill_read")
                with tf.device(device):
                    init = gen_resource_variable_ops.assign_variable_op(handle, value, name="fill")
                if not refreshed_by_chief(var, assignment):
                    with tf.device(server), tf.control_dependencies([scratch.control(visible)]):
                        fresh = gen_resource_variable_ops.read_variable_op(source, facts.dtype, name="refresh_read")
                    with tf.device(device):
                        refreshes.append(gen_resource_variable_ops.assign_variable_op(handle, fresh, name="refresh"))
                handles[var.op_name] = handle.name
                new_vars.append((handle.op.name, init.name))
        step = tf.group(*refreshes, name=sync_scope("AutoDist-Proxy/", assignment.group) + "refreshed").name \
            if refreshes else None
    scratch.commit()
    for var in proxied:
        for consumer, index in _forward_reads(assignment, var.op_name):
            for replica in assignment.local:
                editor.set_input(replica.prefix + consumer, index, handles[var.op_name])
                editor.node(replica.prefix + consumer).device = device
    return [step] if step else [], new_vars
