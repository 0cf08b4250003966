"""Keras 3 models in the scope: equivalence with single-device training, batch-norm statistics, loop guard.

Batch normalization, as documented in docs/keras.md: without synchronized
statistics the moving statistics are mirrored per replica and each replica
updates its copy from its own shard of the batch; fetches and checkpoints give
their mean over the job's replicas. The tests pin that down numerically.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from autodist import AutoDist
from autodist.capture.optimizers import capture_optimizers
from autodist.checkpoint import Saver
from autodist.errors import CaptureError
from autodist.capture.queries import tf_variable
from autodist.capture.graph_item import GraphItem
from autodist.capture.keras import GUARDED_METHODS, collect_state_updates
from autodist.strategies import PS, AllReduce

BATCH, FEATURES = 16, 4


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(3)
    return rng.randn(4, BATCH, FEATURES).astype(np.float32), rng.randn(4, BATCH, 1).astype(np.float32)


def _mlp():
    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(6, activation="tanh", name="hidden"),
                             keras.layers.Dense(1, name="out")])


def _optimizer(kind):
    return keras.optimizers.Adam(0.05) if kind == "keras" else tf.compat.v1.train.AdamOptimizer(0.05)


def _graph(kind):
    model = _mlp()
    x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    optimizer = _optimizer(kind)
    if kind == "keras":
        grads = tf.gradients(loss, model.trainable_variables)
        train = optimizer.apply_gradients(zip(grads, model.trainable_variables))
    else:
        train = optimizer.minimize(loss, var_list=[tf_variable(v) for v in model.trainable_variables])
    return model, x, y, train


def _weights(session, model):
    return session.run([tf_variable(v) for v in model.trainable_variables])


@pytest.mark.parametrize("kind", ["keras", "tf1"])
@pytest.mark.parametrize("builder", [PS(), AllReduce()], ids=["PS", "AllReduce"])
def test_keras_layers_with_either_optimizer_train_like_a_single_device(spec, data, kind, builder):
    xs, ys = data
    graph = tf.Graph()
    item = GraphItem(graph=graph)
    with graph.as_default(), capture_optimizers(), item.as_default():
        model, x, y, train = _graph(kind)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in range(len(xs)):
                session.run(train, {x: xs[step], y: ys[step]})
            expected = _weights(session, model)
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        model, x, y, train = _graph(kind)
        session = ad.create_distributed_session()
        for step in range(len(xs)):
            session.run(train, {x: xs[step], y: ys[step]})
        for got, want in zip(_weights(session, model), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


_PRE_KERNEL = (np.arange(FEATURES * 3, dtype=np.float32).reshape(FEATURES, 3) / 10.0 - 0.5)
_PRE_BIAS = np.array([0.1, -0.2, 0.3], np.float32)


def _bn_model():
    """Dense (fixed initial weights) -> BatchNormalization(momentum 0.5) -> Dense."""
    keras.utils.set_random_seed(11)
    pre = keras.layers.Dense(3, name="pre", kernel_initializer=keras.initializers.Constant(_PRE_KERNEL),
                             bias_initializer=keras.initializers.Constant(_PRE_BIAS))
    return keras.Sequential([keras.Input((FEATURES,)), pre, keras.layers.BatchNormalization(momentum=0.5, name="bn"),
                             keras.layers.Dense(1, name="out")])


def _replica_values(session, variable, replicas=2):
    graph = session.distributed_graph
    name = tf_variable(variable).op.name
    with graph.as_default():
        reads = [gen_resource_variable_ops.read_variable_op(
            graph.get_operation_by_name("AutoDist-Replica-{}/{}".format(r, name)).outputs[0], tf.float32)
            for r in range(replicas)]
    return session._session.run(reads)


def _expected_statistics(x):
    """Moving mean and (biased) variance after one step from (0, 1) with momentum 0.5, on the rows ``x``."""
    h = x @ _PRE_KERNEL + _PRE_BIAS
    return 0.5 * h.mean(axis=0), 0.5 + 0.5 * h.var(axis=0)


def _check_per_replica(means, variances, x):
    for replica, rows in enumerate((x[:BATCH // 2], x[BATCH // 2:])):
        mean, variance = _expected_statistics(rows)
        np.testing.assert_allclose(means[replica], mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(variances[replica], variance, rtol=1e-5, atol=1e-6)
    full_mean, full_variance = _expected_statistics(x)
    np.testing.assert_allclose(np.mean(means, axis=0), full_mean, rtol=1e-5, atol=1e-6)   # the update is linear
    assert not np.allclose(np.mean(variances, axis=0), full_variance)   # but shard variances miss the spread


def test_batch_norm_statistics_are_per_replica_from_each_shard(spec, data, tmp_path):
    xs, ys = data
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model = _bn_model()
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        with collect_state_updates() as updates:
            prediction = model(x, training=True)
        assert len(updates) == 2                      # moving mean and moving variance
        optimizer = keras.optimizers.SGD(0.1)
        loss = tf.reduce_mean(tf.square(prediction - y))
        grads = tf.gradients(loss, model.trainable_variables)
        train = optimizer.apply_gradients(zip(grads, model.trainable_variables))
        saver = Saver()
        session = ad.create_distributed_session()
        session.run([train, updates], {x: xs[0], y: ys[0]})
        bn = model.get_layer("bn")
        means = _replica_values(session, bn.moving_mean)
        variances = _replica_values(session, bn.moving_variance)
        fetched = session.run(tf_variable(bn.moving_mean))
        path = saver.save(session, str(tmp_path / "bn"))
    _check_per_replica(means, variances, xs[0])
    np.testing.assert_allclose(fetched, np.mean(means, axis=0), rtol=1e-6)   # read as on-read variables are
    saved = tf.train.load_checkpoint(path).get_tensor(tf_variable(bn.moving_mean).op.name)
    np.testing.assert_allclose(saved, np.mean(means, axis=0), rtol=1e-6)


def test_ad_function_runs_batch_norm_updates(spec, data):
    xs, ys = data
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, PS())
    with tf.Graph().as_default(), ad.scope():
        model = _bn_model()
        optimizer = keras.optimizers.SGD(0.1)

    @ad.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    train_step(xs[0], ys[0])
    bn = model.get_layer("bn")
    _check_per_replica(_replica_values(ad.session, bn.moving_mean), _replica_values(ad.session, bn.moving_variance),
                       xs[0])


def test_fit_evaluate_and_predict_fail_at_once_inside_the_scope_only(spec):
    """A model not compiled in the scope, and the *_on_batch methods of any, stop at once; compile is restored.

    (A model compiled in the scope gets distributed fit/evaluate/predict: tests/runtime/keras/test_keras_fit.py.)
    """
    originals = {name: keras.Model.__dict__.get(name) for name in GUARDED_METHODS + ("compile",)}
    ad = AutoDist(spec, AllReduce())
    with pytest.raises(RuntimeError, match="boom"):
        with tf.Graph().as_default(), ad.scope():
            model = _mlp()
            for name in GUARDED_METHODS:
                with pytest.raises(CaptureError, match="ad.function"):
                    getattr(model, name)(np.zeros([2, FEATURES], np.float32))
            model.compile(optimizer="sgd", loss="mse")
            for name in GUARDED_METHODS[3:]:
                with pytest.raises(CaptureError, match="ad.function"):
                    getattr(model, name)(np.zeros([2, FEATURES], np.float32))
            raise RuntimeError("boom")
    assert {name: keras.Model.__dict__.get(name) for name in GUARDED_METHODS + ("compile",)} == originals
    assert not any(getattr(getattr(keras.Model, name), "__autodist_guard__", False) for name in GUARDED_METHODS)
