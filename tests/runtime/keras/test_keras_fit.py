"""autodist.runtime.keras.fit: model.fit/evaluate/predict on two CPU replicas equal single-device Keras.

The reference is plain Keras, eager, on one device with the same seed, data and
global batch; the distributed model is built and compiled in ``ad.scope()`` and
trained with the same ``fit`` call. 50 rows in batches of 16 leave a last
partial batch of 2 (one row per replica). Every synchronous builder fits every
model here (one node, the session's one-node pool: ``conftest.py``; Parallax
on the Embedding model only, ``tests/dedupe.py``);
``tests/equivalence/test_keras_fit_equivalence.py`` does the same on two nodes.
"""
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist, strategies
from autodist.kernel.assignment import Replica
from autodist.runtime.keras.steps import node_share
from autodist.strategies import AllReduce
from dedupe import builders_for
from keras_fit_models import (BATCH, BUILDERS, KINDS, SPARSE_KINDS, build as _build, check, close as _close,
                              data as _data, reference, run)


def _session(kind, x, y, **fit):
    model = _build(kind)
    history = model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, **fit).history
    return model, history


def _distributed(spec, builder, kind):
    """``(ad, model)``: ``spec`` a resource spec file, or the one-node pool's ``pooled`` (``conftest.py``)."""
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, builder) if isinstance(spec, str) else spec(builder)
    with tf.Graph().as_default(), ad.scope():
        model = _build(kind)
    return ad, model


def _weights(ad, model):
    return ad.session.run([w.value for w in model.weights if w.trainable])


_reference = functools.lru_cache(maxsize=None)(reference)


#: The fast tier's share of the matrix (the rest is marked slow: the whole matrix costs about 45 CPU seconds).
FAST = {("dense", "AllReduce"), ("dense", "PS"), ("dense", "PartitionedAR"), ("cnn", "PSLoadBalancing"),
        ("embedding", "AllReduce"), ("embedding", "Parallax")}


@pytest.mark.parametrize("kind,builder", [pytest.param(kind, builder, id="{}-{}".format(kind, builder),
                                                       marks=() if (kind, builder) in FAST else pytest.mark.slow)
                                          for kind in KINDS
                                          for builder in builders_for(BUILDERS, kind in SPARSE_KINDS)])
def test_fit_evaluate_predict_equal_single_device(pooled, kind, builder):
    expected = _reference(kind)
    ad, model = _distributed(pooled, getattr(strategies, builder)(), kind)
    result = run(model, kind)
    result["weights"] = _weights(ad, model)
    ad.session.close()
    check(result, expected)


def test_fit_twice_a_dataset_and_early_stopping_follow_single_device(spec):
    """fit(arrays) then fit(dataset) continue training; EarlyStopping stops both at the same epoch."""
    x, y = _data("dense")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    stop = lambda: keras.callbacks.EarlyStopping(monitor="loss", min_delta=0.05, patience=0)  # noqa: E731
    keras.backend.clear_session(free_memory=False)
    reference, first = _session("dense", x, y, epochs=2)
    second = reference.fit(dataset, epochs=30, verbose=0, callbacks=[stop()]).history
    assert len(second["loss"]) < 30

    ad, model = _distributed(spec, AllReduce(), "dense")
    _close(model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0).history, first)
    history = model.fit(dataset, epochs=30, verbose=0, callbacks=[stop()])
    _close(history.history, second)
    assert model.history is history


def test_evaluate_first_and_a_returned_dict(spec):
    x, y = _data("dense")
    keras.backend.clear_session(free_memory=False)
    expected = _build("dense").evaluate(x, y, verbose=0, return_dict=True)
    ad, model = _distributed(spec, AllReduce(), "dense")
    _close(model.evaluate(x, y, verbose=0, return_dict=True), expected)


def test_node_share_takes_this_nodes_replicas_parts():
    class Assignment:
        replicas = [Replica(0, 0, "/job:worker/task:0/cpu:0", ""), Replica(-1, 1, "/job:worker/task:1/cpu:0", ""),
                    Replica(1, 2, "/job:worker/task:0/cpu:1", "")]
        num_replicas = 3
    # 7 rows split 3, 2, 2 over the job's replicas; this node holds the first and the third.
    np.testing.assert_array_equal(node_share(7, Assignment), [0, 1, 2, 5, 6])
    np.testing.assert_array_equal(node_share(1, Assignment), [0])


def _callbacks(directory):
    return [keras.callbacks.LearningRateScheduler(lambda epoch, rate: rate * 2.0),
            keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True),
            keras.callbacks.ModelCheckpoint(str(directory / "best.weights.h5"), monitor="val_loss",
                                            save_best_only=True, save_weights_only=True),
            keras.callbacks.ModelCheckpoint(str(directory / "last.keras")),
            keras.callbacks.CSVLogger(str(directory / "log.csv"))]


def test_callbacks_learning_rate_early_stopping_and_checkpoints_as_on_one_device(spec, tmp_path):
    """The schedule, the stop, the restored best weights and the files equal the single-device run's."""
    x, y = _data("dense")
    fit = dict(epochs=12, validation_data=(x[:20], y[:20]))
    (tmp_path / "one").mkdir()
    (tmp_path / "dist").mkdir()
    keras.backend.clear_session(free_memory=False)
    reference, expected = _session("dense", x, y, callbacks=_callbacks(tmp_path / "one"), **fit)
    assert len(expected["loss"]) < 12 and expected["learning_rate"][1] == 2 * expected["learning_rate"][0]
    expected_weights = reference.get_weights()

    ad, model = _distributed(spec, AllReduce(), "dense")
    history = model.fit(x, y, batch_size=BATCH, shuffle=False, verbose=0, callbacks=_callbacks(tmp_path / "dist"),
                        **fit).history
    _close(history, expected)
    for actual, want in zip(model.get_weights(), expected_weights):
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5)
    assert (tmp_path / "dist" / "log.csv").read_text().splitlines()[0] == \
        (tmp_path / "one" / "log.csv").read_text().splitlines()[0]
    keras.backend.clear_session(free_memory=False)
    for name in ("one", "dist"):   # files single-device Keras loads, holding the same values
        loaded = _build("dense")
        loaded.load_weights(str(tmp_path / name / "best.weights.h5"))
        for actual, want in zip(loaded.get_weights(), expected_weights):
            np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5)
    last = [keras.models.load_model(str(tmp_path / name / "last.keras")).predict(x, verbose=0)
            for name in ("one", "dist")]
    np.testing.assert_allclose(last[1], last[0], rtol=1e-4, atol=1e-5)


def test_tensorboard_writes_the_epoch_logs(spec, tmp_path):
    x, y = _data("dense")
    ad, model = _distributed(spec, AllReduce(), "dense")
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(str(tmp_path), write_graph=False)])
    assert list((tmp_path / "train").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("kind,how", [pytest.param(kind, how, id="{}-{}".format(kind, how),
                                                   marks=() if kind == "dense" else pytest.mark.slow)
                                      for kind in KINDS for how in ("AutoDist", "Keras")
                                      if not (kind == "embedding" and how == "AutoDist")])
def test_accumulating_fit_equals_keras_own_accumulation_on_one_device(spec, kind, how):
    """``AutoDist(accumulation_steps=3)`` with a plain optimizer, or Keras' own ``gradient_accumulation_steps=3``:
    Keras' own accumulation on one device (epochs of 4 batches end mid-accumulation; every batch's logs are the
    job's). Keras adds a sparse gradient to a dense accumulator, autodist keeps its rows as one step of the
    batch of 3b sees them (tests/equivalence/test_accumulation_equivalence.py): the Embedding model runs Keras'
    own option only."""
    expected = reference(kind, 3)
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce(), accumulation_steps=3 if how == "AutoDist" else None)
    with tf.Graph().as_default(), ad.scope():
        model = _build(kind, 3 if how == "Keras" else None)
    result = run(model, kind)
    result["weights"] = _weights(ad, model)
    check(result, expected)


def test_the_eager_scope_form_of_tf_distribute_fits_as_single_device(spec):
    """``with ad.scope():`` under eager execution enters the AutoDist's own graph: build and compile in it,
    then plain fit/evaluate/predict, as with ``strategy.scope()``; a second scope returns to the same graph."""
    assert tf.executing_eagerly()
    expected = _reference("dense")
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with ad.scope():
        assert not tf.executing_eagerly()
        model = _build("dense")
        graph = tf.compat.v1.get_default_graph()
    assert tf.executing_eagerly() and ad.graph_item.graph is graph
    with ad.scope():
        assert tf.compat.v1.get_default_graph() is graph
    result = run(model, "dense")
    result["weights"] = _weights(ad, model)
    check(result, expected)
