"""Sparse gradients across nodes: every node's entries, concatenated, never merged.

Why not a ``SparseConditionalAccumulator``: it sums the entries that several
nodes send for one index into a single entry. A Keras 3 optimizer works on the
entries of an ``IndexedSlices`` one by one before repeated indices are added up
(Adam adds ``square(values)`` to its second moment), so on one device an id
looked up by two rows of the batch contributes ``g1**2 + g2**2``, and after a
merge ``(g1 + g2)**2``: two nodes that both look up an id drifted from one
device. Concatenating hands the optimizer the entries one device has (linear
optimizers see the same sum either way):

    node k != chief:  (values_k, indices_k) --enqueue--> [queue k, on `device`]
    chief:            concat(entries of task 0, 1, ..., N-1)
                      (its own in place, the others dequeued from their queues)

Every node enqueues once per step and the chief dequeues once per step from
every queue; the caller keeps the steps in lockstep (a node's step ends only
after the chief's update: the parameter servers' tokens, the relay's forward).
"""
import tensorflow as tf

__all__ = ["gather_slices"]

_CAPACITY = 2 ** 30


def _queue(device, shared_prefix, task, dtype):
    with tf.device(device):
        return tf.queue.FIFOQueue(_CAPACITY, [dtype, tf.int64], shared_name="{}/{}".format(shared_prefix, task),
                                  name="queue_{}".format(task))


def gather_slices(assignment, device, shared_prefix, values, indices):
    """This node's part of gathering ``(values, indices)`` (int64 indices) of every node on the chief.

    The queues live on ``device``, named ``<shared_prefix>/<task>``. Returns
    ``(push, gathered)``: a node other than the chief enqueues its entries
    (``gathered`` is None); the chief gets ``(values, indices)`` of all nodes
    in task order (``push`` is None).
    """
    node = assignment.node
    if not node.is_chief:
        queue = _queue(device, shared_prefix, node.task_index, values.dtype)
        return queue.enqueue([values, indices], name="push"), None
    parts = []
    for task in range(node.num_tasks):
        if task == node.task_index:
            parts.append((values, indices))
            continue
        taken_values, taken_indices = _queue(device, shared_prefix, task, values.dtype).dequeue(
            name="take_{}".format(task))
        taken_values.set_shape(values.shape)
        taken_indices.set_shape([None])
        parts.append((taken_values, taken_indices))
    return None, (tf.concat([v for v, _ in parts], 0, name="values"),
                  tf.concat([i for _, i in parts], 0, name="indices"))
