"""Mixed precision on one node of two replicas: the steps one device takes, and its numbers, at Keras' default scale.

``keras_half_models``: a ``mixed_float16`` regression under dynamic loss scaling (initial scale 2**15)
with SGD or momentum, whose first-half rows give the replicas that hold them about twice the whole
batch's gradient. Each replica computes its share of the one device's gradient
(``autodist/kernel/loss_shares.py``), so the job skips exactly the steps the one device skips and the
per-batch losses, ``evaluate``, ``predict`` and the weights equal single-device Keras within float16
tolerance, under every synchronous builder. ``tests/equivalence/test_mixed_precision_equivalence.py``
does the same on two nodes of two replicas.
"""
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist, strategies
from keras_fit_models import BUILDERS
import keras_half_models as half

_reference = functools.lru_cache(maxsize=None)(half.reference)

#: SGD under every builder; momentum (its velocity keeps every step's gradient) under a
#: parameter-server and an all-reduce builder.
CELLS = [("sgd", builder) for builder in BUILDERS] + [("momentum", "PS"), ("momentum", "AllReduce")]


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _distributed(spec, builder, optimizer, build_optimizer=False):
    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy("mixed_float16")
    ad = AutoDist(spec, getattr(strategies, builder)())
    with tf.Graph().as_default(), ad.scope():
        model = half.build(optimizer)
        if build_optimizer:   # as fit does before its step: an unbuilt LossScaleOptimizer scales by a constant
            model.optimizer.build(model.trainable_variables)
    return ad, model


@pytest.mark.parametrize("optimizer,builder", [pytest.param(o, b, id="{}-{}".format(o, b)) for o, b in CELLS])
def test_mixed_float16_fit_takes_the_steps_one_device_takes(spec, optimizer, builder):
    ad, model = _distributed(spec, builder, optimizer)
    result = half.run(model)
    result["weights"] = ad.session.run([w.value for w in model.trainable_weights])
    half.check(result, _reference(optimizer))


def test_a_loop_of_ones_own_under_a_loss_scale_optimizer(spec):
    """``ad.function`` with ``scale_loss``, a tape and ``apply_gradients``, as in Keras' mixed-precision guide:
    the loss scale and the weights of the same loop on one device."""
    x, y = half.data()
    batches = [(x[i:i + half.BATCH], y[i:i + half.BATCH]) for i in range(0, half.ROWS, half.BATCH)] * half.EPOCHS

    def loop(model, step):
        for bx, by in batches:
            step(bx, by)

    def make_step(model):
        def step(bx, by):
            with tf.GradientTape() as tape:
                loss = model.optimizer.scale_loss(tf.reduce_mean(keras.losses.mean_squared_error(
                    by, tf.cast(model(bx, training=True), tf.float32))))
            model.optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                                model.trainable_variables))
        return step

    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy("mixed_float16")
    reference = half.build("sgd")
    reference.optimizer.build(reference.trainable_variables)
    loop(reference, tf.function(make_step(reference)))
    ad, model = _distributed(spec, "AllReduce", "sgd", build_optimizer=True)
    loop(model, ad.function(make_step(model)))
    assert ad.session.run(model.optimizer.dynamic_scale.value) == reference.optimizer.dynamic_scale.numpy() < 2 ** 15
    for got, want in zip(ad.session.run([w.value for w in model.trainable_weights]), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=half.RTOL, atol=half.ATOL)
