"""The loss-shares pass: the marker the capture puts on the scaled loss becomes 1/R, the updates read R x.

Numbers on the single-device graph before and after the pass: each gradient the marker reaches is 1/R of
what it was, and a step (which reads R times it) moves the weights as before. A gradient of a loss that
did not pass through ``scale_loss`` is left alone.
"""
import keras
import numpy as np
import tensorflow as tf

from autodist.capture.loss_share import LOSS_SHARE, share_markers
from autodist.kernel.loss_shares import LossShares
from kernel_harness import capture, tf1

X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0


def _model():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    w = tf1.get_variable("w", initializer=tf.ones([3, 1]))
    other = tf1.get_variable("other", initializer=2.0)
    half = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=1024.0)
    optimizer.build([w])
    loss = optimizer.scale_loss(tf.reduce_mean(tf.square(tf.cast(half, tf.float32))))
    g_w = tf.gradients(loss, [w])[0]
    g_other = tf.gradients(tf.square(other), [other])[0]   # not through scale_loss
    train = optimizer.apply_gradients([(g_w, w)])
    plain = keras.optimizers.SGD(0.1).apply_gradients([(g_other, other)])
    return {"train": [train, plain], "grads": [g_w.name, g_other.name],
            "reads": [w.read_value().name, other.read_value().name]}


def _step(item, built):
    graph = item.graph
    with tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        grads = session.run([graph.get_tensor_by_name(n) for n in built["grads"]], {"x:0": X})
        session.run([graph.get_operation_by_name(op.name) for op in built["train"]], {"x:0": X})
        return grads, session.run([graph.get_tensor_by_name(n) for n in built["reads"]])


def test_each_replica_computes_its_share_and_the_update_reads_the_whole():
    item, built = capture(_model)
    assert [op.name for op in share_markers(item.graph)] == [LOSS_SHARE]
    result = LossShares(4)(item)
    assert result.details == ("w",)
    (g_w, g_other), weights = _step(item, built)
    (s_w, s_other), shared_weights = _step(result.item, built)
    np.testing.assert_allclose(s_w, g_w / 4, rtol=1e-3)   # float16 backward: 1/4 is a power of two, exact
    assert s_other == g_other
    for after, before in zip(shared_weights, weights):
        np.testing.assert_allclose(after, before, rtol=1e-6)
    assert share_markers(item.graph)[0].inputs[0].op.type == "Const"   # the input is left alone


def test_one_replica_or_no_marker_leaves_the_item_as_it_is():
    item, _ = capture(_model)
    assert LossShares(1)(item).item is item

    def unmarked():
        w = tf1.get_variable("w", initializer=tf.ones([2]))
        return keras.optimizers.SGD(0.1).apply_gradients([(tf.gradients(tf.reduce_sum(w * w), [w])[0], w)])
    plain, _ = capture(unmarked)
    assert LossShares(4)(plain).item is plain
