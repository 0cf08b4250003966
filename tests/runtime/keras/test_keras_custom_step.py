"""A model's own train_step / test_step / predict_step under autodist's fit equal single-device Keras.

Two CPU replicas, 51 rows in global batches of 16: the last batch of 3 rows is
split 2 + 1, so the weighting of uneven shards is exercised.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.errors import FunctionError
from autodist.strategies import AllReduce, PS
from keras_custom_models import GuideStep

ROWS, BATCH = 51, 16


class OwnTrackers(keras.Model):
    """Its own loss tracker (a scalar Mean per step), a per-row metric, its own test and predict steps."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae = keras.metrics.MeanAbsoluteError(name="mae")

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = tf.reduce_mean(tf.square(y - y_pred)) + 0.01 * tf.reduce_sum(tf.square(self.trainable_weights[0]))
        self.optimizer.apply(tape.gradient(loss, self.trainable_weights), self.trainable_weights)
        self.loss_tracker.update_state(loss)
        self.mae.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mean_abs_error": self.mae.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(tf.reduce_mean(tf.square(y - y_pred)))
        self.mae.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae.result()}

    def predict_step(self, data):
        return tf.tanh(self(data, training=False))


def _data(kind):
    rng = np.random.RandomState(0)
    x = rng.randn(ROWS, 4).astype(np.float32)
    if kind == "guide":
        return x, rng.randint(0, 3, ROWS).astype(np.int32)
    return x, rng.randn(ROWS, 2).astype(np.float32)


def _build(kind):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    if kind == "guide":
        model = GuideStep(inputs, keras.layers.Dense(3)(hidden))
        model.compile(optimizer=keras.optimizers.Adam(0.05),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    else:
        model = OwnTrackers(inputs, keras.layers.Dense(2)(hidden))
        model.compile(optimizer=keras.optimizers.SGD(0.1))
    return model


def _run(model, x, y):
    history = model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0,
                        validation_data=(x[:20], y[:20])).history
    return history, model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True), model.predict(x[:7], verbose=0)


@pytest.mark.parametrize("kind,builder", [("guide", AllReduce()), ("own", PS())], ids=["guide-AllReduce", "own-PS"])
def test_a_custom_step_is_honoured_and_equals_single_device(spec, kind, builder):
    x, y = _data(kind)
    keras.backend.clear_session(free_memory=False)
    reference = _build(kind)
    expected = _run(reference, x, y)
    expected_weights = [w.numpy() for w in reference.weights]

    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        model = _build(kind)
    actual = _run(model, x, y)
    for got, want in zip(actual[:2], expected[:2]):
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)
    np.testing.assert_allclose(actual[2], expected[2], rtol=1e-4, atol=1e-5)
    for got, want in zip(model.get_weights(), expected_weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class RawLoss(GuideStep):
    def train_step(self, data):
        super().train_step(data)
        x, y = data
        return {"loss": self.compute_loss(y=y, y_pred=self(x))}


class Eager(GuideStep):
    def train_step(self, data):
        logs = super().train_step(data)
        print(float(logs["loss"].numpy()))
        return logs


class NoGradients(GuideStep):
    def train_step(self, data):
        x, y = data
        self.compiled_metrics.update_state(y, self(x))
        return {m.name: m.result() for m in self.metrics}


@pytest.mark.parametrize("cls,message", [
    (RawLoss, "computed from .* not only from metric state"),
    (Eager, "could not be traced into autodist's graph"),
    (NoGradients, "applied no gradients through self.optimizer"),
], ids=["raw-loss", "eager-only", "no-gradients"])
def test_a_custom_step_that_cannot_be_exact_is_a_clear_error(spec, cls, message):
    x, y = _data("guide")
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        inputs = keras.Input((4,))
        model = cls(inputs, keras.layers.Dense(3)(inputs))
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(FunctionError, match=message):
        model.fit(x, y, batch_size=BATCH, verbose=0)
