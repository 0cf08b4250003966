"""Mixed precision that a loss-scale error cannot hide in: a float16 regression trained with SGD or momentum.

Dense 8 -> 16 -> 1, ``mse``, ``SGD(0.05)`` (or momentum 0.9), Keras' ``mixed_float16`` policy and its
default dynamic loss scale (2**15), global batches of 16, two epochs of 4 batches. The targets of the
first half of every batch sit far from the model's output and those of the second half near it, so the
replicas that hold the first half have gradients about twice the whole batch's: a job whose replicas
each differentiate their shard's mean loss overflows float16 there at a loss scale where one device does
not, and skips a step (and halves its scale) that the one device takes. SGD turns a skipped step or a
gradient off by a factor straight into the weights (Adam would normalize it away).

``run`` is what a case does: ``fit`` with a callback that keeps every batch's loss and the loss scale
after it, then ``evaluate`` and ``predict``; ``reference`` is the single-device run; ``check`` compares.
"""
import contextlib

import keras
import numpy as np

ROWS, BATCH, EPOCHS = 64, 16, 2
OPTIMIZERS = {"sgd": lambda: keras.optimizers.SGD(0.05), "momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9)}
#: float16 has an 11-bit significand (rounding 2**-11 = 4.9e-4 relative): the replicas' partial sums of a
#: gradient round apart from the one device's single sum, and 8 steps of SGD carry that into the weights
#: and losses; 2e-3 is four such roundings. A skipped step moves the losses by 1e-2 to 1e-1 relative.
RTOL = ATOL = 2e-3


def data():
    rng = np.random.RandomState(0)
    x = rng.randn(ROWS, 8).astype(np.float32)
    y = (rng.randn(ROWS, 1) * 0.5).astype(np.float32)
    y[(np.arange(ROWS) % BATCH) < BATCH // 2] += 6.0
    return x, y


def build(optimizer):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=OPTIMIZERS[optimizer](), loss="mse")
    return model


class BatchLosses(keras.callbacks.Callback):
    """Every batch's logged loss."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(logs["loss"])


def run(model):
    """fit, evaluate and predict: ``{history, batch_losses, evaluate, predict}``."""
    x, y = data()
    batches = BatchLosses()
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[batches])
    return {"history": history.history, "batch_losses": batches.losses,
            "evaluate": model.evaluate(x, y, batch_size=BATCH, verbose=0), "predict": model.predict(x[:8], verbose=0)}


@contextlib.contextmanager
def mixed_float16():
    """A fresh Keras session under the ``mixed_float16`` policy for the block (float32 after it)."""
    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def reference(optimizer):
    """``run`` on one device in plain eager Keras under ``mixed_float16``, with the final trainable weights."""
    with mixed_float16():
        model = build(optimizer)
        result = run(model)
        result["weights"] = [w.numpy() for w in model.trainable_weights]
    return result


def check(actual, expected):
    """Batch by batch, then evaluate, predict and the weights, within float16 tolerance (``RTOL``)."""
    np.testing.assert_allclose(actual["batch_losses"], expected["batch_losses"], rtol=RTOL, atol=ATOL,
                               err_msg="per-batch losses")
    np.testing.assert_allclose(actual["history"]["loss"], expected["history"]["loss"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(actual["evaluate"], expected["evaluate"], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(actual["predict"], expected["predict"], rtol=RTOL, atol=ATOL)
    assert len(actual["weights"]) == len(expected["weights"])
    for got, want in zip(actual["weights"], expected["weights"]):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
