"""Which calls are training steps: those that run an op waiting for the other nodes."""
import tensorflow as tf
from tensorflow.python.ops import collective_ops

from autodist.runtime.session.sync_ops import SyncIndex


def test_a_call_is_a_step_when_its_ops_reach_a_collective_or_a_queue_through_inputs_or_control():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant([1.0], name="x")
        summed = collective_ops.all_reduce_v2(x, group_size=1, group_key=1, instance_key=1)
        tf.identity(summed, name="step")
        with tf.control_dependencies([tf.queue.FIFOQueue(1, [tf.int32], shapes=[[]]).dequeue()]):
            tf.no_op(name="gated")
        tf.identity(x, name="read")
    index = SyncIndex(graph)
    assert index.synchronizes(["step:0"]) and index.synchronizes(["gated"])
    assert not index.synchronizes(["read:0"]) and not index.synchronizes([])
    assert index.synchronizes(["read:0", "step:0"])


def test_in_a_graph_where_nobody_waits_every_call_counts():
    graph = tf.Graph()
    with graph.as_default():
        tf.identity(tf.constant([1.0]), name="read")
    assert SyncIndex(graph).synchronizes(["read:0"])
