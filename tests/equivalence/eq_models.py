"""The equivalence models: small, seeded, deterministic single-device training graphs.

Every model builds into the current default graph and returns a ``Model``:
its train op, a per-example loss (so that the global loss of a distributed
step is the mean of all replicas' per-example losses), its placeholders and
the trainable variables to compare. ``batch(step)`` is the global batch of a
step; every node feeds its own rows of it.
"""
import collections

import keras
import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

GLOBAL_BATCH = 12  # divisible by 1, 2 and 3 replicas
Model = collections.namedtuple("Model", "train per_example placeholders variables")


def _seeded(seed):
    return keras.initializers.GlorotUniform(seed=seed)


def linear_regression():
    x = tf1.placeholder(tf.float32, [None, 5], name="x")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w = tf1.get_variable("W", initializer=tf.constant(np.linspace(-0.5, 0.5, 5, dtype=np.float32).reshape(5, 1)))
    b = tf1.get_variable("b", initializer=tf.zeros([1]))
    per = tf.reduce_sum(tf.square(tf.matmul(x, w) + b - y), axis=1)
    train = tf1.train.MomentumOptimizer(0.05, momentum=0.9).minimize(tf.reduce_mean(per))
    return Model(train, per, {"x": x, "y": y}, [w, b])


def linear_regression_batch(step):
    rs = np.random.RandomState(100 + step)
    x = rs.rand(GLOBAL_BATCH, 5).astype(np.float32)
    y = (x @ np.arange(1, 6, dtype=np.float32).reshape(5, 1) + 0.1 * rs.randn(GLOBAL_BATCH, 1)).astype(np.float32)
    return {"x": x, "y": y}


def _classifier(layer, hidden, labels, dense_seed, rate):
    """A Dense(3) on ``hidden`` (``layer``'s output), softmax cross-entropy, Keras Adam: (train, per, variables)."""
    dense = keras.layers.Dense(3, kernel_initializer=_seeded(dense_seed))
    per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=dense(hidden))
    variables = layer.trainable_weights + dense.trainable_weights
    grads = tf.gradients(tf.reduce_mean(per), variables)
    return keras.optimizers.Adam(rate).apply_gradients(zip(grads, variables)), per, variables


def keras_cnn():
    x = tf1.placeholder(tf.float32, [None, 8, 8, 1], name="images")
    labels = tf1.placeholder(tf.int32, [None], name="labels")
    conv = keras.layers.Conv2D(4, 3, activation="relu", kernel_initializer=_seeded(1))
    train, per, variables = _classifier(conv, keras.layers.Flatten()(conv(x)), labels, 2, 0.01)
    return Model(train, per, {"images": x, "labels": labels}, variables)


def keras_cnn_batch(step):
    rs = np.random.RandomState(200 + step)
    return {"images": rs.rand(GLOBAL_BATCH, 8, 8, 1).astype(np.float32),
            "labels": rs.randint(0, 3, size=GLOBAL_BATCH).astype(np.int32)}


VOCAB = 300000  # 4.8 MB: large enough that the partitioning builders split it


def sparse_embedding():
    ids = tf1.placeholder(tf.int64, [None, 2], name="ids")
    y = tf1.placeholder(tf.float32, [None], name="target")
    emb = tf1.get_variable("emb", shape=[VOCAB, 4], initializer=tf1.random_uniform_initializer(-0.1, 0.1, seed=3))
    w = tf1.get_variable("out", initializer=tf.constant([[1.0], [-1.0], [0.5], [0.25]]))
    hidden = tf.reduce_sum(tf.nn.embedding_lookup(emb, ids), axis=1)
    per = tf.square(tf.matmul(hidden, w)[:, 0] - y)
    train = tf1.train.AdamOptimizer(0.05).minimize(tf.reduce_mean(per))
    return Model(train, per, {"ids": ids, "target": y}, [emb, w])


def sparse_embedding_batch(step):
    rs = np.random.RandomState(300 + step)
    ids = rs.randint(0, VOCAB, size=(GLOBAL_BATCH, 2))
    ids[::3, 0] = 7  # repeated rows across replicas
    return {"ids": ids.astype(np.int64), "target": rs.randn(GLOBAL_BATCH).astype(np.float32)}


def keras_embedding():
    """Keras 3 Adam on an Embedding's IndexedSlices gradient.

    Keras squares the gradient's values entry by entry, before repeated ids are
    summed: a job must hand it every replica's entries as they are (an id that
    two replicas look up stays two entries), as one device has them.
    """
    ids = tf1.placeholder(tf.int32, [None, 3], name="token_ids")
    labels = tf1.placeholder(tf.int32, [None], name="token_labels")
    embedding = keras.layers.Embedding(VOCAB, 4, embeddings_initializer=keras.initializers.RandomUniform(
        -0.1, 0.1, seed=8))
    train, per, variables = _classifier(embedding, tf.reduce_sum(embedding(ids), axis=1), labels, 9, 0.05)
    return Model(train, per, {"token_ids": ids, "token_labels": labels}, variables)


def keras_embedding_batch(step):
    rs = np.random.RandomState(600 + step)
    ids = rs.randint(0, VOCAB, size=(GLOBAL_BATCH, 3))
    ids[:, 0] = rs.randint(0, 3, size=GLOBAL_BATCH)  # every replica of every node repeats these ids
    return {"token_ids": ids.astype(np.int32), "token_labels": rs.randint(0, 3, size=GLOBAL_BATCH).astype(np.int32)}


def while_loop():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    y = tf1.placeholder(tf.float32, [None, 3], name="y")
    w = tf1.get_variable("W_loop", initializer=tf.constant(np.eye(3, dtype=np.float32) * 0.5 + 0.1))

    def body(i, h):
        return i + 1, tf.tanh(tf.matmul(h, w))

    _, h = tf.while_loop(lambda i, h: i < 3, body, [tf.constant(0), x])
    per = tf.reduce_sum(tf.square(h - y), axis=1)
    train = keras.optimizers.SGD(0.1, momentum=0.9).apply_gradients(zip(tf.gradients(tf.reduce_mean(per), [w]), [w]))
    return Model(train, per, {"x": x, "y": y}, [w])


def while_loop_batch(step):
    rs = np.random.RandomState(400 + step)
    return {"x": rs.rand(GLOBAL_BATCH, 3).astype(np.float32), "y": rs.rand(GLOBAL_BATCH, 3).astype(np.float32) - 0.5}


def keras_lstm():
    x = tf1.placeholder(tf.float32, [None, 5, 3], name="sequence")
    y = tf1.placeholder(tf.float32, [None, 1], name="value")
    lstm = keras.layers.LSTM(4, kernel_initializer=_seeded(5), recurrent_initializer=_seeded(6))
    dense = keras.layers.Dense(1, kernel_initializer=_seeded(7))
    per = tf.square(dense(lstm(x)) - y)[:, 0]
    variables = lstm.trainable_weights + dense.trainable_weights
    grads = tf.gradients(tf.reduce_mean(per), variables)
    train = keras.optimizers.Adam(0.02).apply_gradients(zip(grads, variables))
    return Model(train, per, {"sequence": x, "value": y}, variables)


def keras_lstm_batch(step):
    rs = np.random.RandomState(500 + step)
    seq = rs.rand(GLOBAL_BATCH, 5, 3).astype(np.float32)
    return {"sequence": seq, "value": seq.sum(axis=(1, 2)).reshape(-1, 1).astype(np.float32) / 5.0}


#: the models whose gradients include a sparse one (tf.IndexedSlices): Parallax runs on these only (tests/dedupe.py)
SPARSE_MODELS = {"embedding", "keras_embedding"}

MODELS = {
    "linreg": (linear_regression, linear_regression_batch),
    "cnn": (keras_cnn, keras_cnn_batch),
    "embedding": (sparse_embedding, sparse_embedding_batch),
    "keras_embedding": (keras_embedding, keras_embedding_batch),
    "while_loop": (while_loop, while_loop_batch),
    "lstm": (keras_lstm, keras_lstm_batch),
}
