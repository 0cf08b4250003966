"""Every option of Keras 3's optimizers and every built-in optimizer: exact under every builder, or refused by name.

One node, two CPU replicas (the session's one-node pool: ``conftest.py``).
The table's rows are ``keras_options.OPTIONS`` (clipping, weight decay and
AdamW, EMA and its overwrite, loss scaling, Keras' own gradient accumulation,
schedules, mixed float16/bfloat16 with dynamic loss scaling) and
``OPTIMIZERS`` (every built-in one); its columns the synchronous builders (the
partitioning ones splitting this model's kernels; Parallax plans this model
as AllReduce does, ``tests/dedupe.py``). Through Keras ``fit`` the options
that change what is synchronized (mixed precision, Keras' accumulation) run
under every builder, the options inside the optimizer's own update
(``keras_options.INTERNAL``) under one builder of each kind
(``ONE_PER_KIND``: refusals are keyed by kind), and every optimizer under a
parameter-server and an all-reduce builder that both split variables: the
epoch losses and the final weights equal plain eager Keras on one device
(within half-precision tolerance under a mixed policy), or the job is
refused with the typed error the table names. ``ad.function`` and a
``sess.run`` loop run every option under one of those two builders.
"""
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import errors
from keras_options import (BUILDERS, INTERNAL, ONE_PER_KIND, OPTIMIZERS, OPTIONS, REFUSED, ROWS_BY_NAME, SPLITTING,
                           batches, fit, fit_reference, loop_reference, model, set_policy, step_loss)

#: the cells of the fast tier (the rest is slow: the whole table costs a few minutes)
FAST = {("AdamW", "PS"), ("global_clipnorm", "PartitionedPS"), ("mixed_float16", "AllReduce"),
        ("gradient_accumulation_steps", "PSLoadBalancing"), ("ema_overwrite_frequency", "RandomAxisPartitionAR")}


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


_fit_reference = functools.lru_cache(maxsize=None)(fit_reference)
_loop_reference = functools.lru_cache(maxsize=None)(loop_reference)


def _distributed(pooled, option, builder):
    keras.backend.clear_session(free_memory=False)
    set_policy(option)
    return pooled(BUILDERS[builder][0]())


def _refusal(option, builder):
    return REFUSED.get((option, BUILDERS[builder][1]))


def _check_weights(got, want, option):
    tolerance = ROWS_BY_NAME[option][2]
    assert len(got) == len(want)
    for actual, expected in zip(got, want):
        np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)


def _cells(rows, builders):
    return [pytest.param(option, builder, id="{}-{}".format(option, builder),
                         marks=() if (option, builder) in FAST else pytest.mark.slow)
            for option in rows for builder in builders]


@pytest.mark.parametrize("option,builder", _cells(INTERNAL, ONE_PER_KIND) + _cells(
    [o for o in OPTIONS if o not in INTERNAL], BUILDERS) + _cells(OPTIMIZERS, SPLITTING))
def test_fit(pooled, option, builder):
    refusal = _refusal(option, builder)
    losses, weights = (None, None) if refusal else _fit_reference(option)
    ad = _distributed(pooled, option, builder)
    if refusal:
        with pytest.raises(getattr(errors, refusal[0]), match=refusal[1]):
            with tf.Graph().as_default(), ad.scope():
                net = model(option)
            fit(net)
        return
    with tf.Graph().as_default(), ad.scope():
        net = model(option)
    np.testing.assert_allclose(fit(net), losses, rtol=ROWS_BY_NAME[option][2])
    _check_weights(ad.session.run([w.value for w in net.trainable_weights]), weights, option)
    ad.session.close()


def _train_in_graph(pooled, option, builder, run_steps):
    """Build the row's model in the scope with its optimizer built (as ``fit`` builds it before its step)."""
    ad = _distributed(pooled, option, builder)
    with tf.Graph().as_default(), ad.scope():
        net = model(option)
        net.optimizer.build(net.trainable_variables)
        weights = run_steps(ad, net)
    ad.session.close()
    return weights


@pytest.mark.slow
@pytest.mark.parametrize("option,builder", _cells(OPTIONS, SPLITTING[:1]))
def test_ad_function(pooled, option, builder):
    refusal = _refusal(option, builder)

    def run_steps(ad, net):
        @ad.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = net.optimizer.scale_loss(step_loss(net, x, y))
            net.optimizer.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)
            return loss
        for x, y in batches():
            step(x, y)
        return ad.session.run([w.value for w in net.trainable_weights])
    if refusal:
        with pytest.raises(getattr(errors, refusal[0]), match=refusal[1]):
            _train_in_graph(pooled, option, builder, run_steps)
        return
    _check_weights(_train_in_graph(pooled, option, builder, run_steps), _loop_reference(option), option)


@pytest.mark.slow
@pytest.mark.parametrize("option,builder", _cells(OPTIONS, SPLITTING[1:]))
def test_session_run(pooled, option, builder):
    refusal = _refusal(option, builder)

    def run_steps(ad, net):
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        y = tf.compat.v1.placeholder(tf.int32, [None])
        loss = net.optimizer.scale_loss(step_loss(net, x, y))
        train = net.optimizer.apply_gradients(zip(tf.gradients(loss, [w.value for w in net.trainable_variables]),
                                                  net.trainable_variables))
        session = ad.create_distributed_session()
        for bx, by in batches():
            session.run(train, {x: bx, y: by})
        return session.run([w.value for w in net.trainable_weights])
    if refusal:
        with pytest.raises(getattr(errors, refusal[0]), match=refusal[1]):
            _train_in_graph(pooled, option, builder, run_steps)
        return
    _check_weights(_train_in_graph(pooled, option, builder, run_steps), _loop_reference(option), option)


def test_a_keras_loss_scale_read_before_the_optimizer_is_built_is_the_initial_one():
    """Why the graph rows build the optimizer first: an unbuilt LossScaleOptimizer scales by a constant."""
    keras.backend.clear_session(free_memory=False)
    with tf.Graph().as_default():
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        assert float(tf.compat.v1.Session().run(optimizer.scale_loss(tf.constant(1.0)))) == optimizer.initial_scale
