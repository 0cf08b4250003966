"""The model zoo: real architectures nobody here wrote, trained with Keras ``fit``, and their one-device runs.

Each entry builds a compiled Keras model (seeded) and its data; ``run`` fits it (no shuffling) and returns
the per-epoch losses and every weight (trainable or not: batch-norm statistics too). Widths, inputs and
steps are tiny so the tier stays cheap; the optimizers are SGD or momentum, which carry a gradient's scale
into the weights (Adam would hide a factor of two).

    transformer   Embedding + MultiHeadAttention + LayerNormalization (a Transformer encoder block)
    lstm          Embedding + LSTM
    bigru         Embedding + Bidirectional(GRU)
    ncf           two Embedding tables (users, items) from dict inputs, neural collaborative filtering
    regularized   an MLP with L2 kernel and activity regularization (the losses Keras adds to the loss)
    cnn_syncbn    Conv2D + BatchNormalization(synchronized=True)
    resnet50      keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10), with
                  AutoDist(sync_batch_norm=True); one step (at their random initialization a second step of
                  these deep models moves one device itself by 1e-2 when only its arithmetic changes)
    mobilenetv2   keras.applications.MobileNetV2(alpha=0.35, weights=None, 32x32, classes=10), likewise
"""
import contextlib
import dataclasses
import os
from typing import Callable

import keras
import numpy as np

#: ``AUTODIST_ZOO_FLOATX=float64`` (``benchmarks/zoo_table.py --float64``) runs the tier in float64, where
#: every cell must equal one device to ``FLOAT64_TOLERANCE``: the algorithm, without float32's rounding.
FLOATX = os.environ.get("AUTODIST_ZOO_FLOATX", "float32")
FLOAT64_TOLERANCE = 1e-9

#: float32 rounding of sums taken in another order (each replica's, then across replicas) is 1e-7 relative
#: per operation; a few SGD steps of these small models keep the weights within 2e-6 of one device's: 1e-5
#: relative (and 1e-6 absolute, for weights near zero) leaves room for that and catches any real error (a
#: gradient off by a factor, a skipped or repeated step, statistics of one replica: 1e-3 and more).
RTOL, ATOL = 1e-5, 1e-6
#: ResNet50 and MobileNetV2 at their random initialization amplify float32 rounding by orders of magnitude:
#: the sums of a replica's half of the batch, added to the other's, round apart from one device's sum of the
#: whole batch, and dozens of normalizations (each dividing by a standard deviation much smaller than the
#: mean) carry that through. Measured on ResNet50, one step of SGD(1e-4) on these 8 rows: the first kernel
#: moves by 0.069, and two replicas with synchronized statistics land within 4.7e-3 of one device (the loss
#: within 4.3e-5 relative); one device alone lands 9.3e-4 away when only its statistics add the batch's two
#: halves. In float64 the same two replicas equal one device to 6e-14 (benchmarks/zoo_table.py --float64):
#: the algorithm is exact, the difference is rounding. So: every weight within 1e-2, the loss within 1e-4
#: relative. A gradient off by a factor or statistics left per replica move the first kernel by 0.07 or more
#: (without the switch the weights are off by 0.48, the loss by 3e-2).
DEEP_ATOL, DEEP_LOSS_RTOL = 1e-2, 1e-4


@dataclasses.dataclass(frozen=True)
class Zoo:
    build: Callable          # () -> compiled model
    data: Callable           # () -> (x, y)
    batch: int
    epochs: int
    sync_batch_norm: bool = False
    deep: bool = False       # compared with the deep tolerances above


def _tokens(rows, length, vocab, classes, seed=0):
    rng = np.random.RandomState(seed)
    return rng.randint(1, vocab, (rows, length)).astype(np.int32), rng.randint(0, classes, rows).astype(np.int32)


def _sgd(rate=0.1, momentum=0.0):
    return keras.optimizers.SGD(rate, momentum=momentum)


def _classifier(layers, optimizer):
    model = keras.Sequential(layers)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def transformer():
    keras.utils.set_random_seed(1)
    tokens = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(30, 16)(tokens)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(16)(keras.layers.Dense(32, activation="relu")(x)))
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(tokens, outputs)
    model.compile(optimizer=_sgd(0.1, 0.9), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def lstm():
    keras.utils.set_random_seed(1)
    return _classifier([keras.Input((6,), dtype="int32"), keras.layers.Embedding(30, 8), keras.layers.LSTM(8),
                        keras.layers.Dense(3)], _sgd(0.5))


def bigru():
    keras.utils.set_random_seed(1)
    return _classifier([keras.Input((6,), dtype="int32"), keras.layers.Embedding(30, 8),
                        keras.layers.Bidirectional(keras.layers.GRU(6)), keras.layers.Dense(3)], _sgd(0.5, 0.9))


def ncf():
    keras.utils.set_random_seed(1)
    user, item = keras.Input((1,), dtype="int32", name="user"), keras.Input((1,), dtype="int32", name="item")
    u = keras.layers.Flatten()(keras.layers.Embedding(20, 6)(user))
    i = keras.layers.Flatten()(keras.layers.Embedding(25, 6)(item))
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([u, i, u * i]))
    model = keras.Model({"user": user, "item": item}, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=_sgd(0.1, 0.9), loss="mse")
    return model


def ncf_data():
    rng = np.random.RandomState(0)
    users, items = rng.randint(0, 20, (32, 1)).astype(np.int32), rng.randint(0, 25, (32, 1)).astype(np.int32)
    return {"user": users, "item": items}, ((users * 7 + items * 3) % 5).astype(np.float32)


def regularized():
    keras.utils.set_random_seed(1)
    l2 = keras.regularizers.L2(0.05)
    return _classifier([keras.Input((5,)),
                        keras.layers.Dense(8, activation="relu", kernel_regularizer=l2, activity_regularizer=l2),
                        keras.layers.Dense(3, kernel_regularizer=l2)], _sgd(0.2))


def dense_data():
    rng = np.random.RandomState(0)
    return rng.randn(32, 5).astype(np.float32), rng.randint(0, 3, 32).astype(np.int32)


def cnn_syncbn():
    keras.utils.set_random_seed(1)
    return _classifier([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3),
                        keras.layers.BatchNormalization(synchronized=True), keras.layers.ReLU(),
                        keras.layers.Flatten(), keras.layers.Dense(3)], _sgd(0.1))


def image_data(rows, size, channels, classes):
    rng = np.random.RandomState(0)
    x = rng.rand(rows, size, size, channels).astype(np.float32)
    x[: rows // 2] += 1.0   # the replicas holding the first rows see other statistics than the others
    return x, rng.randint(0, classes, rows).astype(np.int32)


def resnet50():
    keras.utils.set_random_seed(1)
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(optimizer=_sgd(1e-4), loss=keras.losses.SparseCategoricalCrossentropy())
    return model


def mobilenetv2():
    keras.utils.set_random_seed(1)
    model = keras.applications.MobileNetV2(alpha=0.35, weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(optimizer=_sgd(1e-3), loss=keras.losses.SparseCategoricalCrossentropy())
    return model


MODELS = {
    "transformer": Zoo(transformer, lambda: _tokens(32, 6, 30, 3), 16, 2),
    "lstm": Zoo(lstm, lambda: _tokens(32, 6, 30, 3, seed=1), 16, 2),
    "bigru": Zoo(bigru, lambda: _tokens(32, 6, 30, 3, seed=2), 16, 2),
    "ncf": Zoo(ncf, ncf_data, 16, 2),
    "regularized": Zoo(regularized, dense_data, 16, 2),
    "cnn_syncbn": Zoo(cnn_syncbn, lambda: image_data(32, 6, 2, 3), 16, 2),
    "resnet50": Zoo(resnet50, lambda: image_data(8, 32, 3, 10), 8, 1, sync_batch_norm=True, deep=True),
    "mobilenetv2": Zoo(mobilenetv2, lambda: image_data(8, 32, 3, 10), 8, 1, sync_batch_norm=True, deep=True),
}


def run(model, name):
    """``fit`` of ``model`` on zoo entry ``name``'s data: ``{"loss": per-epoch losses, "weights": every weight}``."""
    zoo = MODELS[name]
    x, y = zoo.data()
    if FLOATX != "float32":
        x = x.astype(FLOATX) if x.dtype.kind == "f" else x
        y = y.astype(FLOATX) if y.dtype.kind == "f" else y
    history = model.fit(x, y, batch_size=zoo.batch, epochs=zoo.epochs, shuffle=False, verbose=0).history
    return {"loss": history["loss"], "weights": [np.asarray(w) for w in model.get_weights()]}


def reference(name):
    """``run`` in plain eager Keras on one device."""
    keras.backend.clear_session(free_memory=False)
    with float_type():
        model = MODELS[name].build()
        return run(model, name)


@contextlib.contextmanager
def float_type():
    """Keras' float type is ``FLOATX`` within the block (the default, float32, after it)."""
    keras.backend.set_floatx(FLOATX)
    try:
        yield
    finally:
        keras.backend.set_floatx("float32")


def differences(actual, expected):
    """(largest absolute weight difference, largest relative loss difference) of a run against one device's."""
    weights = max(float(np.abs(a - e).max()) for a, e in zip(actual["weights"], expected["weights"]))
    loss = max(abs(a - e) / abs(e) for a, e in zip(actual["loss"], expected["loss"]))
    return weights, loss


def check(actual, expected, name):
    """A distributed ``run`` equals one device's within the entry's tolerance (module constants)."""
    assert len(actual["weights"]) == len(expected["weights"])
    if FLOATX == "float64":
        for i, (got, want) in enumerate(zip(actual["weights"], expected["weights"])):
            np.testing.assert_allclose(got, want, rtol=FLOAT64_TOLERANCE, atol=FLOAT64_TOLERANCE,
                                       err_msg="weight {}".format(i))
        return
    if not MODELS[name].deep:
        np.testing.assert_allclose(actual["loss"], expected["loss"], rtol=RTOL, atol=ATOL)
        for i, (got, want) in enumerate(zip(actual["weights"], expected["weights"])):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg="weight {}".format(i))
        return
    np.testing.assert_allclose(actual["loss"], expected["loss"], rtol=DEEP_LOSS_RTOL)
    for i, (got, want) in enumerate(zip(actual["weights"], expected["weights"])):
        np.testing.assert_allclose(got, want, rtol=0, atol=DEEP_ATOL, err_msg="weight {}".format(i))
