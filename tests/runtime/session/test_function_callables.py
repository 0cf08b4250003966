"""ad.function on any Python callable: methods (AutoDist's case c2), static and class methods, lambdas, _names.

AutoDist's integration case c2 decorates a method of a model class and calls
it on an instance. Every case here trains a linear model for two steps on two
CPU replicas and compares with the same steps computed by numpy.
"""
import functools

import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.runtime.session.function import scope_name
from autodist.strategies import PS, AllReduce

LR = 0.1


def _batch(seed):
    rng = np.random.RandomState(seed)
    return rng.rand(8, 2).astype(np.float32), rng.rand(8, 1).astype(np.float32)


def _expected(w, batches):
    """The weights after SGD on the squared error, one step per batch (float64)."""
    w = np.array(w, dtype=np.float64)
    for x, y in batches:
        x, y = x.astype(np.float64), y.astype(np.float64)
        w = w - LR * (2.0 / len(x)) * x.T @ (x @ w - y)
    return w


def _step(w, optimizer, x, y):
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    optimizer.apply_gradients(zip(tf.gradients(loss, [w]), [w]))
    return loss


def _weights(ad, w):
    return ad.session.run(w)


def _model_class(ad):
    """AutoDist's c2 shape: a model class whose methods are decorated with ``@ad.function``."""
    class Model:
        def __init__(self, name, start):
            with tf.compat.v1.variable_scope(name):
                self.w = tf.compat.v1.get_variable("w", initializer=tf.constant(start))
            self.optimizer = tf.compat.v1.train.GradientDescentOptimizer(LR)

        @ad.function
        def train_fn(self, xy):
            x, y = xy
            return _step(self.w, self.optimizer, x, y)

        @ad.function
        def predict_fn(self, x):
            return tf.matmul(x, self.w)
    return Model


def test_ad_function_on_a_method_binds_self_per_instance(spec):
    ad = AutoDist(spec, PS())
    Model = _model_class(ad)
    with tf.Graph().as_default(), ad.scope():
        first = Model("first", [[0.5], [-0.5]])
        second = Model("second", [[1.0], [2.0]])
    batches = [_batch(0), _batch(1)]
    for batch in batches:
        first.train_fn(batch)
    x = batches[0][0]
    trained = _expected([[0.5], [-0.5]], batches)
    np.testing.assert_allclose(first.predict_fn(x), x @ trained, rtol=1e-5)
    np.testing.assert_allclose(second.predict_fn(x), x @ np.array([[1.0], [2.0]]), rtol=1e-5)
    np.testing.assert_allclose(_weights(ad, first.w), trained, rtol=1e-5)
    assert first.predict_fn.traces == 1 and second.predict_fn.traces == 1 and first.train_fn.traces == 1
    assert first.train_fn.__name__ == "train_fn" and Model.train_fn.__name__ == "train_fn"


def test_ad_function_on_methods_of_several_instances_training_in_one_job(spec):
    """Each instance's train_fn is its own trace. One all-reduce group per variable keeps the two training
    steps independent (a PS step, or a group spanning both, joins every trained variable's update)."""
    ad = AutoDist(spec, AllReduce(chunk_size=1))
    Model = _model_class(ad)
    with tf.Graph().as_default(), ad.scope():
        first = Model("first", [[0.5], [-0.5]])
        second = Model("second", [[1.0], [2.0]])
    batches = [_batch(6), _batch(7)]
    first.train_fn(batches[0])
    second.train_fn(batches[0])
    first.train_fn(batches[1])
    np.testing.assert_allclose(_weights(ad, first.w), _expected([[0.5], [-0.5]], batches), rtol=1e-5)
    np.testing.assert_allclose(_weights(ad, second.w), _expected([[1.0], [2.0]], batches[:1]), rtol=1e-5)
    assert first.train_fn.traces == 1 and second.train_fn.traces == 1


def test_ad_function_on_methods_of_several_instances_in_several_jobs(spec):
    for start in ([[0.5], [-0.5]], [[1.0], [2.0]]):
        ad = AutoDist(spec, PS())
        with tf.Graph().as_default(), ad.scope():
            model = _model_class(ad)("model", start)
        batches = [_batch(3), _batch(4)]
        for batch in batches:
            model.train_fn(batch)
        np.testing.assert_allclose(_weights(ad, model.w), _expected(start, batches), rtol=1e-5)


@pytest.mark.parametrize("kind", ["static_outside", "static_inside", "on_class"])
def test_ad_function_on_static_and_class_methods(spec, kind):
    ad = AutoDist(spec, AllReduce())
    state = {}

    class Steps:
        @staticmethod
        @ad.function
        def static_outside(x, y):
            return _step(state["w"], state["opt"], x, y)

        @ad.function
        @staticmethod
        def static_inside(x, y):
            return _step(state["w"], state["opt"], x, y)

        @ad.function
        @classmethod
        def on_class(cls, x, y):
            assert cls is Steps
            return _step(state["w"], state["opt"], x, y)

    with tf.Graph().as_default(), ad.scope():
        state["w"] = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5], [-0.5]]))
        state["opt"] = tf.compat.v1.train.GradientDescentOptimizer(LR)
    batches = [_batch(2), _batch(3)]
    getattr(Steps(), kind)(*batches[0])     # on an instance
    getattr(Steps, kind)(*batches[1])       # on the class
    np.testing.assert_allclose(_weights(ad, state["w"]), _expected([[0.5], [-0.5]], batches), rtol=1e-5)


@pytest.mark.parametrize("kind", ["lambda", "underscore", "partial", "callable object"])
def test_ad_function_on_any_callable_name(spec, kind):
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5], [-0.5]]))
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(LR)

    def _private_step(x, y):
        return _step(w, optimizer, x, y)

    class Callable:
        def __call__(self, x, y):
            return _step(w, optimizer, x, y)

    fn = {"lambda": lambda x, y: _step(w, optimizer, x, y), "underscore": _private_step,
          "partial": functools.partial(_step, w, optimizer), "callable object": Callable()}[kind]
    step = ad.function(fn)
    batches = [_batch(5), _batch(6)]
    for x, y in batches:
        step(x, y)
    np.testing.assert_allclose(_weights(ad, w), _expected([[0.5], [-0.5]], batches), rtol=1e-5)


def test_scope_names_of_callables():
    assert [scope_name(n) for n in ("<lambda>", "_step", "__call__", "train_fn", "<>")] == [
        "lambda", "step", "call__", "train_fn", "function"]
