"""All-reduce without collectives, for jobs that also use parameter servers across nodes.

A TensorFlow step with collective ops shares its step id with the same step
of every other process, and a process that finishes its step cleans that id
up on every server it used, aborting whatever another process still runs
there. Parameter-server steps run on other nodes' servers, so a job that
mixes parameter servers and all-reduce over several nodes (Parallax with
sparse variables) relays its all-reduced gradients instead:

    node k:   sum of its replicas' gradients --push--> [SUM accumulator on the chief]
    chief:    take(all nodes) = sum --> queue of every other node, and its own replicas
    node k:   sum <--dequeue-- its queue --> / R --> every replica applies the mean to its own copy

An IndexedSlices gradient goes to the chief as its entries (``slices.py``), not
into an accumulator that would merge repeated indices.
The applied update is the same mean, so the numbers are those of collective
all-reduce; the traffic goes through the chief. Compression needs collectives
and is refused here.
"""
import tensorflow as tf

from autodist.errors import TransformError
from autodist.capture.queries import tensor_name
from autodist.plan.contract import Compressor
from autodist.plan.names import host_cpu, sync_scope
from autodist.kernel.reshaper import Reshaper
from autodist.kernel.synchronization import slices, wiring

__all__ = ["relay_all_reduce", "needs_relay", "relay_sum"]

_ANY_STEP = 2 ** 62
_CAPACITY = 2 ** 30


def needs_relay(assignment):
    return assignment.node.num_tasks > 1 and bool(assignment.ps_vars) and bool(assignment.ar_vars)


def _queue(assignment, name, task, dtypes):
    with tf.device(host_cpu(assignment.node.chief_task)):
        shared = "{}/relay/{}/{}".format(assignment.node.job_id, name, task)
        return tf.queue.FIFOQueue(_CAPACITY, dtypes, shared_name=shared, name="queue_{}".format(task))


def _exchange(assignment, name, local_push, take, dtypes):
    """The chief takes and forwards what ``take`` makes; the others wait for it. Returns its tensors."""
    if assignment.node.is_chief:
        mean = take()
        forwards = [_queue(assignment, name, task, dtypes).enqueue(mean, name="forward_{}".format(task))
                    for task in range(assignment.node.num_tasks) if task != assignment.node.task_index]
        with tf.control_dependencies(forwards):  # the chief's step includes forwarding
            return [tf.identity(t) for t in mean]
    with tf.control_dependencies([local_push]):
        received = _queue(assignment, name, assignment.node.task_index, dtypes).dequeue(name="receive")
    return received if isinstance(received, (list, tuple)) else [received]


def _dense(scratch, assignment, group, index, reduced):
    shapes = [assignment.analysis.variables[v.op_name].shape for v in group]
    sizes = [s.num_elements() for s in shapes]
    dtype = assignment.analysis.grad_dtype(group[0].op_name)
    name = "group_{}".format(index)
    with tf.name_scope("{}{}/".format(sync_scope("AutoDist-Relay/", assignment.group), name)):
        flats = []
        for replica in assignment.local:
            with tf.device(replica.device):
                reshape = Reshaper()
                grads = [scratch.tensor(replica.prefix + assignment.analysis.grad_tensors[v.op_name]["dense"])
                         for v in group]
                flats.append(tf.concat([reshape(g, [-1]) for g in grads], 0))
        total = relay_sum(assignment, name, flats, dtype, [sum(sizes)])
        with tf.device(assignment.local[0].device):
            mean = tf.truediv(total, tf.cast(assignment.num_replicas, dtype))
        for replica in assignment.local:
            with tf.device(replica.device):
                reshape = Reshaper()
                pieces = tf.split(mean, sizes) if len(group) > 1 else [mean]
                for var, piece, shape in zip(group, pieces, shapes):
                    reduced[(replica.prefix, var.op_name)] = {"dense": reshape(piece, shape).name}


def relay_sum(assignment, name, tensors, dtype, shape):
    """The sum of ``tensors`` (one per local replica) over every replica of the job, the same tensor on every
    node: this node's sum pushed into a SUM accumulator on the chief, which takes every node's and forwards
    the total (``_exchange``). ``name`` names the accumulator and the queues (unique in the job)."""
    with tf.device(assignment.local[0].device):
        local = tf.add_n(tensors) if len(tensors) > 1 else tf.identity(tensors[0])
    with tf.device(host_cpu(assignment.node.chief_task)):
        acc = tf.compat.v1.ConditionalAccumulator(dtype, shape=shape, reduction_type="SUM",
                                                  shared_name="{}/relay/{}".format(assignment.node.job_id, name))
        push = acc.apply_grad(local, local_step=_ANY_STEP)
    with tf.control_dependencies([push]):
        return _exchange(assignment, name, push, lambda: [acc.take_grad(assignment.node.num_tasks)], [dtype])[0]


def _sparse(scratch, assignment, var, reduced):
    facts = assignment.analysis.variables[var.op_name]
    parts = assignment.analysis.grad_tensors[var.op_name]
    name = var.op_name
    with tf.name_scope("{}{}/".format(sync_scope("AutoDist-Relay/", assignment.group), name)):
        with tf.device(assignment.local[0].device):
            values = tf.concat([scratch.tensor(r.prefix + parts["values"]) for r in assignment.local], 0)
            indices = tf.concat([tf.cast(scratch.tensor(r.prefix + parts["indices"]), tf.int64)
                                 for r in assignment.local], 0)
        chief_cpu = host_cpu(assignment.node.chief_task)
        with tf.device(chief_cpu):
            push, gathered = slices.gather_slices(
                assignment, chief_cpu, "{}/relay-slices/{}".format(assignment.node.job_id, name), values, indices)

        def take():
            return [tf.truediv(gathered[0], tf.cast(assignment.num_replicas, facts.dtype)), gathered[1]]
        mean_values, mean_indices = _exchange(assignment, name, push, take, [facts.dtype, tf.int64])
        original = assignment.analysis.graph.get_tensor_by_name(parts["indices"]).dtype
        indices_name = tf.cast(mean_indices, original).name
        for replica in assignment.local:
            result = {"values": mean_values.name, "indices": indices_name}
            if "dense_shape" in parts:
                result["dense_shape"] = tensor_name(replica.prefix + parts["dense_shape"])
            reduced[(replica.prefix, var.op_name)] = result


def relay_all_reduce(editor, assignment, groups):
    """Relay the all-reduced variables' gradients through the chief (see the module docstring)."""
    for group in groups:
        for var in group:
            if var.synchronizer.compressor != Compressor.NoneCompressor:
                raise TransformError(
                    "asks for gradient compression, which needs collective all-reduce; TensorFlow cannot run "
                    "collectives in the steps of a job that also uses parameter servers across nodes. Use one "
                    "synchronizer kind, or no compressor", pass_name="sync_between_graph", variable=var.op_name)
    scratch = editor.scratch()
    reduced = {}
    with scratch.graph.as_default():
        for index, group in enumerate(groups):
            if group[0].sparse:
                for var in group:
                    _sparse(scratch, assignment, var, reduced)
            else:
                _dense(scratch, assignment, group, index, reduced)
    scratch.commit()
    for (prefix, var_op), components in reduced.items():
        wiring.reroute_gradient(editor, assignment.analysis, var_op, prefix, components)
    return [], []
