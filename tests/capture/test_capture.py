"""Capture of optimizers and gradients: every tf1 and Keras 3 optimizer, dense and sparse."""
import numpy as np
import pytest
import tensorflow as tf
import keras

from autodist.capture.optimizers import capture_optimizers
from autodist.capture.graph_item import GraphItem, get_default_graph_item

tf1 = tf.compat.v1

TF1_OPTIMIZERS = {
    "GradientDescent": lambda: tf1.train.GradientDescentOptimizer(0.1),
    "Momentum": lambda: tf1.train.MomentumOptimizer(0.1, momentum=0.9),
    "Adam": lambda: tf1.train.AdamOptimizer(0.1),
    "Adagrad": lambda: tf1.train.AdagradOptimizer(0.1),
    "Adadelta": lambda: tf1.train.AdadeltaOptimizer(1.0),
    "RMSProp": lambda: tf1.train.RMSPropOptimizer(0.1),
    "RMSProp-centered": lambda: tf1.train.RMSPropOptimizer(0.1, centered=True),
    "RMSProp-momentum": lambda: tf1.train.RMSPropOptimizer(0.1, momentum=0.5),
    "Ftrl": lambda: tf1.train.FtrlOptimizer(0.1),
}

KERAS_OPTIMIZERS = {
    "SGD": lambda: keras.optimizers.SGD(0.1),
    "SGD-momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "SGD-nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "Adam": lambda: keras.optimizers.Adam(0.1),
    "Adam-amsgrad": lambda: keras.optimizers.Adam(0.1, amsgrad=True),
    "Adamax": lambda: keras.optimizers.Adamax(0.1),
    "Adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "Adadelta": lambda: keras.optimizers.Adadelta(1.0),
    "Ftrl": lambda: keras.optimizers.Ftrl(0.1),
    "Nadam": lambda: keras.optimizers.Nadam(0.1),
    "RMSprop": lambda: keras.optimizers.RMSprop(0.1),
    "RMSprop-momentum": lambda: keras.optimizers.RMSprop(0.1, momentum=0.5),
    "RMSprop-centered": lambda: keras.optimizers.RMSprop(0.1, centered=True),
}

X = np.random.RandomState(0).rand(8, 3).astype(np.float32)
IDS = np.array([1, 2, 3, 1, 0, 7, 7, 2], dtype=np.int32)


def _model(x, ids):
    w = tf1.get_variable("W", initializer=tf.constant([[0.5], [-0.3], [0.2]]))
    e = tf1.get_variable("E", initializer=tf.constant(np.linspace(-1, 1, 10, dtype=np.float32).reshape(10, 1)))
    b = tf1.get_variable("b", initializer=tf.constant([0.1]))
    pred = tf.matmul(x, w) + tf.gather(e, ids) + b
    return tf.reduce_mean(tf.square(pred - 1.0)), [w, e, b]


def _capture(make_optimizer, how="tf.gradients"):
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            x = tf1.placeholder(tf.float32, [None, 3], name="x")
            ids = tf1.placeholder(tf.int32, [None], name="ids")
            with tf.GradientTape() as tape:
                loss, variables = _model(x, ids)
            opt = make_optimizer()
            if how == "tf.gradients":
                train = opt.apply_gradients(zip(tf.gradients(loss, variables), variables))
            elif how == "minimize":
                train = opt.minimize(loss)
            elif how == "GradientTape":
                train = opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        item.prepare()
    return graph, item, train, loss, variables


def _check_grad_info(item, variables):
    info = item.var_op_name_to_grad_info
    assert sorted(info) == ["E", "W", "b"]
    for var in variables:
        grad, target, update = info[var.op.name]
        assert target.name == var.name
        assert update.inputs[0].op.name == var.op.name, update
        assert update.name not in item.info.initializers
        assert isinstance(grad, tf.IndexedSlices) == (var.op.name == "E")
    assert item.var_op_name_to_grad_info_v2 is info


@pytest.mark.parametrize("name", sorted(TF1_OPTIMIZERS))
def test_tf1_optimizer_grad_info(name):
    graph, item, train, loss, variables = _capture(TF1_OPTIMIZERS[name])
    _check_grad_info(item, variables)
    assert item.optimizer is type(TF1_OPTIMIZERS[name]())
    with tf1.Session(graph=graph) as sess:
        sess.run(tf1.global_variables_initializer())
        before = sess.run(loss, {"x:0": X, "ids:0": IDS})
        for _ in range(5):
            sess.run(train, {"x:0": X, "ids:0": IDS})
        assert sess.run(loss, {"x:0": X, "ids:0": IDS}) < before


@pytest.mark.parametrize("name", sorted(KERAS_OPTIMIZERS))
def test_keras_optimizer_grad_info(name):
    graph, item, train, loss, variables = _capture(KERAS_OPTIMIZERS[name])
    _check_grad_info(item, variables)
    assert isinstance(train, tf.Operation), "the train op must be fetchable by a Session"


def _eager_steps(make_optimizer, steps):
    init = _initial_values()
    variables = [tf.Variable(v) for v in init]
    opt = make_optimizer()
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            w, e, b = variables
            pred = tf.matmul(X, w) + tf.gather(e, IDS) + b
            loss = tf.reduce_mean(tf.square(pred - 1.0))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    return losses, [v.numpy() for v in variables]


def _initial_values():
    graph = tf.Graph()
    with graph.as_default():
        _, variables = _model(tf1.placeholder(tf.float32, [None, 3]), tf1.placeholder(tf.int32, [None]))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            return sess.run(variables)


@pytest.mark.parametrize("name", sorted(KERAS_OPTIMIZERS))
def test_keras_graph_mode_matches_eager(name):
    steps = 4
    graph, item, train, loss, variables = _capture(KERAS_OPTIMIZERS[name])
    losses = []
    with tf1.Session(graph=graph) as sess:
        sess.run(tf1.global_variables_initializer())
        for _ in range(steps):
            losses.append(sess.run([train, loss], {"x:0": X, "ids:0": IDS})[1])
        final = sess.run(variables)
    eager_losses, eager_final = _eager_steps(KERAS_OPTIMIZERS[name], steps)
    # The graph's loss is read in the same run as the update: compare step by step.
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(final, eager_final):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family,how", [
    ("tf1", "tf.gradients"), ("tf1", "minimize"), ("tf1", "GradientTape"),
    ("keras", "tf.gradients"), ("keras", "GradientTape"),
])
def test_capture_paths(family, how):
    make = TF1_OPTIMIZERS["Adam"] if family == "tf1" else KERAS_OPTIMIZERS["Adam"]
    graph, item, train, loss, variables = _capture(make, how)
    _check_grad_info(item, variables)
    with tf1.Session(graph=graph) as sess:
        sess.run(tf1.global_variables_initializer())
        before = sess.run(variables[0])
        sess.run(train, {"x:0": X, "ids:0": IDS})
        assert not np.allclose(sess.run(variables[0]), before)


def test_apply_records_optimizer_args_once():
    graph, item, *_ = _capture(lambda: keras.optimizers.Adam(0.05, beta_1=0.8))
    assert item.optimizer is keras.optimizers.Adam
    assert item.optimizer_args == (0.05,)
    assert item.optimizer_kwargs == {"beta_1": 0.8}


def _originals():
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from tensorflow.python.training.optimizer import Optimizer
    return {
        "tf1.apply": Optimizer.__dict__["apply_gradients"],
        "tf1.adam.init": tf1.train.AdamOptimizer.__dict__["__init__"],
        "keras.apply_gradients": BaseOptimizer.__dict__["apply_gradients"],
        "keras.apply": BaseOptimizer.__dict__["apply"],
        "keras.scale_loss": BaseOptimizer.__dict__["scale_loss"],
        "keras.loss_scale.scale_loss": keras.optimizers.LossScaleOptimizer.__dict__["scale_loss"],
        "keras.adam.init": keras.optimizers.Adam.__dict__["__init__"],
    }


def test_patches_are_restored_after_an_exception():
    before = _originals()
    with pytest.raises(RuntimeError, match="boom"):
        with capture_optimizers():
            assert _originals() != before
            raise RuntimeError("boom")
    assert _originals() == before


def test_outside_the_scope_keras_behaves_as_plain_tensorflow():
    with capture_optimizers():
        pass
    graph = tf.Graph()
    with graph.as_default():
        v = tf1.get_variable("v", initializer=1.0)
        result = keras.optimizers.SGD(0.1).apply_gradients([(tf.constant(1.0), v)])
        # Plain TF 2.21: the iterations variable comes back, not a train op.
        assert not isinstance(result, tf.Operation)
        assert "iteration" in result.path
    assert get_default_graph_item() is None
