"""The models and data of the Keras fit tests: a dense model, a CNN and an Embedding model, seeded.

50 rows in global batches of 16 leave a last partial batch of 2.
"""
import keras
import numpy as np

ROWS, BATCH = 50, 16


def data(kind):
    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, ROWS).astype(np.int32)
    if kind == "cnn":
        return rng.rand(ROWS, 6, 6, 1).astype(np.float32), y
    if kind == "embedding":
        return rng.randint(0, 20, (ROWS, 5)).astype(np.int32), y
    return rng.randn(ROWS, 4).astype(np.float32), y


def build(kind):
    keras.utils.set_random_seed(1)
    layers = {
        "dense": [keras.Input((4,)), keras.layers.Dense(8, activation="relu")],
        "cnn": [keras.Input((6, 6, 1)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten()],
        "embedding": [keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 4),
                      keras.layers.GlobalAveragePooling1D()],
    }[kind]
    model = keras.Sequential(layers + [keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent")])
    return model
