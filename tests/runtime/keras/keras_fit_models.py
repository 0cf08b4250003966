"""The models and data of the Keras fit tests: a dense model, a CNN and an Embedding model, seeded.

50 rows in global batches of 16 leave a last partial batch of 2. ``run`` is
what an equivalence case does with a model (``fit`` with validation data,
``evaluate``, ``predict``), ``reference`` its single-device result and
``check`` the comparison with a distributed one.
"""
import keras
import numpy as np

ROWS, BATCH = 50, 16
KINDS = ("dense", "cnn", "embedding")
#: the kinds whose gradients include a sparse one (the Embedding's): Parallax runs on these only (tests/dedupe.py)
SPARSE_KINDS = {"embedding"}
#: Every synchronous builder, and AutoStrategy (whichever plan it picks): the Keras fit matrices' rows.
BUILDERS = ("PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax", "AutoStrategy")
EPOCHS, VALIDATION_ROWS, PREDICT_ROWS = 3, 20, 7


def data(kind):
    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, ROWS).astype(np.int32)
    if kind == "cnn":
        return rng.rand(ROWS, 6, 6, 1).astype(np.float32), y
    if kind == "embedding":
        return rng.randint(0, 20, (ROWS, 5)).astype(np.int32), y
    return rng.randn(ROWS, 4).astype(np.float32), y


def build(kind, accumulation_steps=None):
    """The model of ``kind``, compiled; ``accumulation_steps``: Keras' own ``gradient_accumulation_steps``."""
    keras.utils.set_random_seed(1)
    layers = {
        "dense": [keras.Input((4,)), keras.layers.Dense(8, activation="relu")],
        "cnn": [keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten()],
        "embedding": [keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 4),
                      keras.layers.GlobalAveragePooling1D()],
    }[kind]
    model = keras.Sequential(layers + [keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.05, gradient_accumulation_steps=accumulation_steps),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent")])
    return model


def run(model, kind):
    """fit for EPOCHS epochs with validation data, then evaluate and predict: {history, evaluate, predict}."""
    x, y = data(kind)
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                        validation_data=(x[:VALIDATION_ROWS], y[:VALIDATION_ROWS])).history
    return {"history": history, "evaluate": model.evaluate(x, y, batch_size=BATCH, verbose=0),
            "predict": model.predict(x[:PREDICT_ROWS], verbose=0)}


def reference(kind, accumulation_steps=None, policy="float32"):
    """``run`` in plain eager Keras on one device, with the final trainable weights."""
    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = build(kind, accumulation_steps)
        result = run(model, kind)
        result["weights"] = [w.numpy() for w in model.trainable_weights]
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return result


def close(actual, expected, rtol=1e-4, atol=1e-5):
    """Two fit histories (or returned dicts) hold the same keys and values."""
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=rtol, atol=atol, err_msg=name)


def check(actual, expected, rtol=1e-4, atol=1e-5):
    """A distributed ``run`` (with its weights) equals the single-device one within float tolerance (or the
    one given: half precision)."""
    close(actual["history"], expected["history"], rtol, atol)
    np.testing.assert_allclose(actual["evaluate"], expected["evaluate"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(actual["predict"], expected["predict"], rtol=rtol, atol=atol)
    assert len(actual["weights"]) == len(expected["weights"])
    for got, want in zip(actual["weights"], expected["weights"]):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
