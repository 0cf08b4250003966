"""Bounded staleness: no node finishes a step more than s steps ahead of the slowest.

Every ordered pair of nodes (w, v) has a token queue Q[w<-v] on w's CPU,
filled with s tokens when w initializes. At the end of each step, node w
enqueues one token into every Q[v<-w] and then takes one token out of every
Q[w<-v]. The (t+1)-th take needs v to have finished t+1-s steps, so when w
finishes step t, every other node has finished at least t+1-s: w is at most s
steps ahead. Parameter updates themselves are asynchronous.
"""
import tensorflow as tf

from autodist.plan.names import host_cpu

__all__ = ["barrier", "prefill", "staleness_of"]

_CAPACITY = 2 ** 30


def staleness_of(assignment):
    """The bound the job keeps (the strictest of its variables), or None without bounded staleness."""
    synchronizers = [v.synchronizer for v in assignment.ps_vars]
    bounds = [s.staleness for s in synchronizers if s.sync and s.staleness > 0]
    if not bounds or assignment.node.num_tasks < 2:
        return None
    return min(bounds)


def _queue(assignment, owner, sender):
    with tf.device(host_cpu(owner)):
        return tf.queue.FIFOQueue(_CAPACITY, [tf.int32], shapes=[[]],
                                  shared_name="{}/stale/{}<-{}".format(assignment.node.job_id, owner, sender),
                                  name="queue_{}_from_{}".format(owner, sender))


def barrier(editor, assignment, after):
    """Add this node's end-of-step barrier (after the op ``after``); returns its op names."""
    if staleness_of(assignment) is None:
        return []
    me, tasks = assignment.node.task_index, range(assignment.node.num_tasks)
    scratch = editor.scratch()
    with scratch.graph.as_default(), tf.name_scope("AutoDist-Staleness/"):
        with tf.control_dependencies([scratch.control(after)]):
            sent = [_queue(assignment, peer, me).enqueue(0, name="signal_{}".format(peer))
                    for peer in tasks if peer != me]
        with tf.control_dependencies(sent):
            taken = [_queue(assignment, me, peer).dequeue(name="take_{}".format(peer)) for peer in tasks if peer != me]
        done = tf.group(*taken, name="barrier").name
    scratch.commit()
    return [done]


def prefill(scratch, assignment):
    """In ``scratch``: fill this node's incoming queues with s tokens each; returns the op, or None."""
    bound = staleness_of(assignment)
    if bound is None:
        return None
    me = assignment.node.task_index
    # Another op for the same shared queue: op names differ, the resource is the same.
    with tf.name_scope("AutoDist-Staleness/prefill/"):
        fills = [_queue(assignment, me, peer).enqueue_many([tf.zeros([bound], tf.int32)],
                                                           name="prefill_{}".format(peer))
                 for peer in range(assignment.node.num_tasks) if peer != me]
        return tf.group(*fills, name="prefill")
