"""Bounded staleness: no node finishes a step more than s steps ahead of the slowest.

Every ordered pair of nodes (w, v) has a token queue Q[w<-v] on w's CPU,
filled with s tokens when w initializes. At the end of each step, node w
enqueues one token into every Q[v<-w] and then takes one token out of every
Q[w<-v]. The (t+1)-th take needs v to have finished t+1-s steps, so when w
finishes step t, every other node has finished at least t+1-s: w is at most s
steps ahead. Parameter updates themselves are asynchronous.
"""
import tensorflow as tf

__all__ = ["barrier", "prefill", "staleness_of"]

_CAPACITY = 2 ** 30


def staleness_of(plan):
    """The bound the job keeps (the strictest of its variables), or None without bounded staleness."""
    bounds = [v.staleness for v in plan.ps_vars if v.sync and v.staleness > 0]
    if not bounds or plan.node.num_tasks < 2:
        return None
    return min(bounds)


def _queue(plan, owner, sender):
    with tf.device(plan.host_cpu(owner)):
        return tf.queue.FIFOQueue(_CAPACITY, [tf.int32], shapes=[[]],
                                  shared_name="{}/stale/{}<-{}".format(plan.node.job_id, owner, sender),
                                  name="queue_{}_from_{}".format(owner, sender))


def barrier(editor, plan, after):
    """Add this node's end-of-step barrier (after the op ``after``); returns its op names."""
    if staleness_of(plan) is None:
        return []
    me, tasks = plan.node.task_index, range(plan.node.num_tasks)
    scratch = editor.scratch()
    with scratch.graph.as_default(), tf.name_scope("AutoDist-Staleness/"):
        with tf.control_dependencies([scratch.control(after)]):
            sent = [_queue(plan, peer, me).enqueue(0, name="signal_{}".format(peer)) for peer in tasks if peer != me]
        with tf.control_dependencies(sent):
            taken = [_queue(plan, me, peer).dequeue(name="take_{}".format(peer)) for peer in tasks if peer != me]
        done = tf.group(*taken, name="barrier").name
    scratch.commit()
    return [done]


def prefill(scratch, plan):
    """In ``scratch``: fill this node's incoming queues with s tokens each; returns the op, or None."""
    bound = staleness_of(plan)
    if bound is None:
        return None
    me = plan.node.task_index
    # Another op for the same shared queue: op names differ, the resource is the same.
    with tf.name_scope("AutoDist-Staleness/prefill/"):
        fills = [_queue(plan, me, peer).enqueue_many([tf.zeros([bound], tf.int32)], name="prefill_{}".format(peer))
                 for peer in range(plan.node.num_tasks) if peer != me]
        return tf.group(*fills, name="prefill")
