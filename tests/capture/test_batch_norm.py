"""autodist.capture.batch_norm: batch normalization whose statistics the kernel can synchronize.

On one device the markers are identities: a layer with ``synchronized=True`` computes Keras' own synchronized
moments, a layer the switch converts computes ``tf.nn.moments`` (what it computes unsynchronized), to the
bit or nearly; the gradients flow through both markers. Keras is untouched outside the block.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist.capture.batch_norm import (MEAN_ON_READ, SYNC_STATISTICS, SYNC_STATISTICS_GRAD, mean_on_read_variables,
                                         statistics_markers, synchronized_batch_norm)
from autodist.errors import CaptureError

tf1 = tf.compat.v1
X = (np.random.RandomState(0).rand(6, 3, 3, 4) * [1.0, 5.0, 0.1, 20.0]).astype(np.float32)


def _layer_outputs(synchronized, every_layer=None):
    """(outputs, gradient of their weighted sum w.r.t. x, moving mean, moving variance) of a BN layer, trained on X
    in a graph, inside ``synchronized_batch_norm(every_layer)`` unless it is None; and the graph."""
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(2)
    graph = tf.Graph()
    with graph.as_default():
        layer = keras.layers.BatchNormalization(synchronized=synchronized, momentum=0.5)
        x = tf.constant(X)
        if every_layer is None:
            y = layer(x, training=True)
        else:
            with synchronized_batch_norm(every_layer):
                y = layer(x, training=True)
        grad = tf.gradients(tf.reduce_sum(y * np.arange(4, dtype=np.float32)), x)[0]
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            values = session.run([y, grad, layer.moving_mean.value, layer.moving_variance.value])
    return values, graph


@pytest.mark.parametrize("synchronized", [True, False], ids=["synchronized", "converted"])
def test_marked_moments_are_the_layers_own_on_one_device(synchronized):
    want, _ = _layer_outputs(synchronized)
    got, graph = _layer_outputs(synchronized, every_layer=True)
    for actual, expected in zip(got, want):
        np.testing.assert_allclose(actual, expected, rtol=2e-6, atol=2e-6)
    names = [op.name.rsplit("/", 1)[-1].split("_")[0] for op in statistics_markers(graph)]
    rounds = 1 if synchronized else 2   # Keras' one pass, or tf.nn.moments' mean and then squared differences
    assert sorted(names) == [SYNC_STATISTICS] * rounds + [SYNC_STATISTICS_GRAD] * rounds
    assert mean_on_read_variables(graph) == []


def test_a_per_replica_layer_records_its_statistics_to_be_read_as_their_mean():
    _, graph = _layer_outputs(False, every_layer=False)
    assert statistics_markers(graph) == []
    assert mean_on_read_variables(graph) == ["batch_normalization/moving_mean", "batch_normalization/moving_variance"]
    assert graph.get_collection(MEAN_ON_READ) == mean_on_read_variables(graph)


def test_a_masked_layer_is_refused_and_keras_is_restored():
    cls = keras.layers.BatchNormalization
    original = cls.__dict__["_moments"]
    with tf.Graph().as_default():
        layer = cls(synchronized=True)
        x = tf.constant(X[:, 0])   # (6, 3, 4): a sequence of 3 steps
        with pytest.raises(CaptureError, match="BatchNormalization '.*' is called with a mask"):
            with synchronized_batch_norm():
                assert cls.__dict__["_moments"] is not original
                layer(x, training=True, mask=tf.constant([[True, True, False]] * 6))
    assert cls.__dict__["_moments"] is original
