"""A character-level LSTM language model (Keras 3) on the Zen of Python, TF1-style graph.

    python examples/lstm_lm.py

The text ships with Python (the ``this`` module's source; read, not imported,
so nothing is printed). Windows of 32 characters predict their next
characters; an embedding, an LSTM of 128 units and a softmax layer train with
Keras' Adam on global batches of 32 windows, each of the two loopback nodes
feeding half, under AllReduce by default (the LSTM's loop is a While op whose
body reads each replica's own copy of the weights). The loss is fetched per
example, so each node prints the loss of its own share. Expected: the loss
falls from ln(45 characters) ~ 3.8 to below 0.5 after the default 300 steps
(measured 0.22, about 25 s) and the model completes "Beautiful is" from memory:
'Beautiful is better than ugly.\nExpli'.
"""
import ast
import importlib.util

import numpy as np

from common import autodist, batch_loss, node_rows, parser, quiet_start, say

WINDOW, BATCH = 32, 32


def zen():
    """The Zen of Python, decoded from the ``this`` module's source without importing it."""
    import codecs
    source = open(importlib.util.find_spec("this").origin).read()
    tree = ast.parse(source)
    encoded = next(node.value.value for node in tree.body
                   if isinstance(node, ast.Assign) and node.targets[0].id == "s")
    return codecs.decode(encoded, "rot13")


def windows(text, vocabulary):
    ids = np.array([vocabulary.index(c) for c in text], np.int32)
    starts = np.arange(len(ids) - WINDOW - 1)
    inputs = np.stack([ids[s:s + WINDOW] for s in starts])
    targets = np.stack([ids[s + 1:s + WINDOW + 1] for s in starts])
    return inputs, targets


def main():
    args = parser(__doc__.splitlines()[0], "AllReduce", 300, log_every=50).parse_args()
    quiet_start(args)
    import keras
    import tensorflow as tf

    text = zen()
    vocabulary = sorted(set(text))
    inputs, targets = windows(text, vocabulary)
    ad = autodist(args)
    rows = node_rows(ad, BATCH)
    with tf.Graph().as_default(), ad.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((None,), dtype="int32"),
                                  keras.layers.Embedding(len(vocabulary), 32, name="embedding"),
                                  keras.layers.LSTM(128, return_sequences=True, name="lstm"),
                                  keras.layers.Dense(len(vocabulary), name="logits")])
        x = tf.compat.v1.placeholder(tf.int32, [None, WINDOW], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [None, WINDOW], name="y")
        per_example = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            y, model(x, training=True), from_logits=True), axis=1)
        optimizer = keras.optimizers.Adam(5e-3)
        grads = tf.gradients(batch_loss(ad, per_example, BATCH), model.trainable_variables)
        train = optimizer.apply_gradients(zip(grads, model.trainable_variables))
        prompt = tf.compat.v1.placeholder(tf.int32, [None, None], name="prompt")
        next_char = tf.argmax(model(prompt, training=False)[:, -1], axis=-1)
        session = ad.create_distributed_session()
        order = np.random.RandomState(0).permutation(len(inputs))
        for step in range(1, args.steps + 1):
            start = (step - 1) * BATCH % (len(order) - BATCH + 1)
            batch = order[start:start + BATCH][rows]
            losses, _ = session.run([per_example, train], {x: inputs[batch], y: targets[batch]})
            ad.log_scalar("loss", losses.mean())
            if step % args.log_every == 0 or step == 1:
                say(ad, "step {:4d}  loss {:.4f}  perplexity {:.2f}".format(step, losses.mean(),
                                                                           np.exp(losses.mean())))
        completion = "Beautiful is"
        for _ in range(24):
            ids = np.array([[vocabulary.index(c) for c in completion]], np.int32)
            completion += vocabulary[int(session.run(next_char, {prompt: ids})[0])]
        say(ad, "completion: {!r}".format(completion))


if __name__ == "__main__":
    main()
