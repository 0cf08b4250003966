"""The four models of the step-time benchmark, described once and built two ways.

A model is a list of layer tuples; ``graph_logits`` builds it from raw
TensorFlow ops on ``tf.compat.v1`` variables (autodist, the hand-written
parameter server, the single-process reference) and ``keras_model`` builds the
same layers as a Keras 3 model (MultiWorkerMirroredStrategy)::

    ("dense", units, activation)    x @ W + b, then relu or nothing
    ("conv", filters)               3x3 'same' convolution + bias + relu
    ("pool",)                       2x2 max pool, stride 2
    ("flatten",)
    ("embed", rows, dim)            table lookup of the integer ids (B, k) -> (B, k, dim)
    ("mean",)                       mean over axis 1: (B, k, dim) -> (B, dim)

The graph build reads the table with ``tf.nn.embedding_lookup`` (only the
looked-up rows travel, the gradient is IndexedSlices); Keras 3's ``Embedding``
reads the table densely, as the issue's MWMS figures did. Initializers match
(Glorot-uniform kernels, zero biases, uniform(-0.05, 0.05) tables). Losses are
plain TensorFlow ops, the same in a tf1 graph and in a ``tf.function``.

Nothing here imports TensorFlow at import time: the harness only needs the
descriptions and parameter counts.
"""
import dataclasses
import math

import numpy as np

__all__ = ["Model", "MODELS", "param_count", "synthetic_batch", "graph_logits", "keras_model", "eager_model", "loss",
           "model_named"]


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    input_shape: tuple   # per example
    input_ids: int       # > 0: the input is integer ids in [0, input_ids)
    classes: int         # > 0: integer labels and softmax cross-entropy; 0: one float target and MSE
    layers: tuple
    batch: int           # per worker; the global batch is num_workers times this
    steps: int           # default number of timed steps per run
    learning_rate: float = 0.01
    net: object = None   # a family of ``paper_models``: ``net(Net, x) -> logits`` instead of ``layers``


MODELS = {m.name: m for m in (
    Model("mlp", (4096,), 0, 10, (("dense", 2048, "relu"),) * 5 + (("dense", 10, None),), 32, 30),
    Model("cnn", (32, 32, 3), 0, 10,
          (("conv", 32), ("pool",), ("conv", 64), ("pool",), ("conv", 128), ("pool",), ("flatten",),
           ("dense", 192, "relu"), ("dense", 10, None)), 32, 100),
    Model("emb", (16,), 1_000_000, 0,
          (("embed", 1_000_000, 64), ("mean",), ("dense", 64, "relu"), ("dense", 1, None)), 256, 100),
    Model("tiny", (10,), 0, 0, (("dense", 1, None),), 8, 200),
)}


def model_named(name):
    """A step-time model or a family of ``paper_models`` (the paper's table), by name."""
    if name in MODELS:
        return MODELS[name]
    from paper_models import FAMILIES
    return FAMILIES[name]


def _shapes(model):
    """Yield (kind, variable shapes, output shape per example) for each layer, from the input shape."""
    shape = model.input_shape
    for layer in model.layers:
        kind = layer[0]
        if kind == "dense":
            variables, shape = [(shape[-1], layer[1]), (layer[1],)], shape[:-1] + (layer[1],)
        elif kind == "conv":
            variables, shape = [(3, 3, shape[-1], layer[1]), (layer[1],)], shape[:-1] + (layer[1],)
        elif kind == "pool":
            variables, shape = [], (shape[0] // 2, shape[1] // 2, shape[2])
        elif kind == "flatten":
            variables, shape = [], (math.prod(shape),)
        elif kind == "embed":
            variables, shape = [(layer[1], layer[2])], shape + (layer[2],)
        elif kind == "mean":
            variables, shape = [], shape[1:]
        else:
            raise ValueError("unknown layer kind {!r} in model {}".format(kind, model.name))
        yield kind, variables, shape


def param_count(model):
    if model.net is not None:
        from paper_models import family_counts
        return family_counts(model)[1]
    return sum(math.prod(s) for _, variables, _ in _shapes(model) for s in variables)


def synthetic_batch(model, size, seed):
    """The fixed batch one node feeds at every step: ``(x, y)`` numpy arrays of ``size`` examples."""
    rng = np.random.RandomState(seed)
    if model.input_ids:
        x = rng.randint(0, model.input_ids, (size,) + model.input_shape).astype(np.int64)
    else:
        x = rng.standard_normal((size,) + model.input_shape).astype(np.float32)
    if model.classes:
        y = rng.randint(0, model.classes, (size,)).astype(np.int64)
    else:
        y = rng.standard_normal((size, 1)).astype(np.float32)
    return x, y


def loss(model, logits, labels):
    """Mean loss over the batch (softmax cross-entropy or squared error)."""
    import tensorflow as tf
    if model.classes:
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    return tf.reduce_mean(tf.square(logits - labels))


def graph_logits(model, x):
    """Build the model on ``x`` in the default tf1 graph, creating its variables with ``get_variable``."""
    import tensorflow as tf
    if model.net is not None:
        from paper_models import GraphNet
        return model.net(GraphNet(tf), x)
    tf1 = tf.compat.v1
    h = x
    for index, (layer, (kind, variables, _)) in enumerate(zip(model.layers, _shapes(model))):
        with tf1.variable_scope("{}{}".format(kind, index)):
            if kind in ("dense", "conv"):
                w = tf1.get_variable("kernel", variables[0], initializer=tf1.glorot_uniform_initializer())
                b = tf1.get_variable("bias", variables[1], initializer=tf1.zeros_initializer())
                h = (tf.matmul(h, w) if kind == "dense" else tf.nn.conv2d(h, w, 1, "SAME")) + b
                h = tf.nn.relu(h) if kind == "conv" or layer[2] == "relu" else h
            elif kind == "pool":
                h = tf.nn.max_pool2d(h, 2, 2, "VALID")
            elif kind == "flatten":
                h = tf.reshape(h, [-1, math.prod(h.shape[1:])])
            elif kind == "embed":
                table = tf1.get_variable("table", variables[0],
                                         initializer=tf1.random_uniform_initializer(-0.05, 0.05))
                h = tf.nn.embedding_lookup(table, h)
            else:   # mean
                h = tf.reduce_mean(h, axis=1)
    return h


def eager_model(model, x):
    """``(forward, trainable variables)`` of the model for eager training (create it inside the strategy's
    scope; ``x``: a batch, which builds a family's variables once): a Keras 3 model of the layers, or the
    family written on ``paper_models.EagerNet``."""
    if model.net is None:
        net = keras_model(model)
        return (lambda batch: net(batch, training=True)), net.trainable_variables
    import tensorflow as tf
    from paper_models import EagerNet
    net = EagerNet(tf)
    model.net(net, x)
    return (lambda batch: model.net(net, batch)), list(net.store.values())


def keras_model(model):
    """The same layers as a Keras 3 Sequential model (create it inside the strategy's scope)."""
    import keras
    make = {
        "dense": lambda layer: keras.layers.Dense(layer[1], activation=layer[2]),
        "conv": lambda layer: keras.layers.Conv2D(layer[1], 3, padding="same", activation="relu"),
        "pool": lambda layer: keras.layers.MaxPooling2D(2),
        "flatten": lambda layer: keras.layers.Flatten(),
        "embed": lambda layer: keras.layers.Embedding(layer[1], layer[2]),
        "mean": lambda layer: keras.layers.GlobalAveragePooling1D(),
    }
    inputs = keras.Input(model.input_shape, dtype="int64" if model.input_ids else "float32")
    return keras.Sequential([inputs] + [make[layer[0]](layer) for layer in model.layers])
