"""A linear-regression job every process of which the platform starts (``AutoDist()`` finds its place).

    python join_linear.py [--strategy BUILDER] [--steps N] [--sleep S] [--checkpoint-dir DIR] [--keras]

The data and the single-device reference are ``jobtools.linear_reference``'s
(seed 0). Each process takes its share of the global batch by
``ad.worker_index``, trains until the global step reaches ``--steps`` (from a
checkpoint, if the directory holds one), printing ``STEP <global step>``, and
ends with ``RESULT <json>``: its index and the final weights. ``--sleep``
pauses after each step (a kill lands mid-run). ``--keras``: the same model as
a Keras ``Dense`` trained by ``model.fit`` (one epoch per step). The learning
rate is ``JOIN_LINEAR_LR`` when set (a process whose graph differs from the
chief's).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

import autodist
from autodist import strategies

BATCH, FEATURES, LR, SEED = 12, 3, 0.1, 0


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def data():
    rng = np.random.RandomState(SEED)
    return rng.rand(BATCH, FEATURES).astype(np.float32), rng.rand(BATCH, 1).astype(np.float32)


def graph_job(ad, args):
    x_all, y_all = data()
    rows = np.array_split(np.arange(BATCH), ad.num_workers)[ad.worker_index]
    with tf.Graph().as_default(), ad.scope():
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        w = tf.Variable(np.array([[0.5], [-0.3], [0.2]], np.float32), name="w")
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        step = tf.compat.v1.train.get_or_create_global_step()
        lr = float(os.environ.get("JOIN_LINEAR_LR", LR))
        train = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step)
        session = ad.create_distributed_session()
        done = session.run(step)
        while done < args.steps:
            session.run(train, {x: x_all[rows], y: y_all[rows]})
            done = session.run(step)
            say("STEP {}".format(done))
            time.sleep(args.sleep)
        return session.run(w).ravel().tolist()


def keras_job(ad, args):
    import keras
    x_all, y_all = data()
    with tf.Graph().as_default(), ad.scope():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(
            1, use_bias=False, kernel_initializer=keras.initializers.Constant([[0.5], [-0.3], [0.2]]))])
        model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    model.fit(x_all, y_all, batch_size=BATCH, epochs=args.steps, shuffle=False, verbose=0)
    return np.asarray(model.get_weights()[0]).ravel().tolist()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", default="PS")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--keras", action="store_true")
    args = parser.parse_args()
    extra = {"checkpoint_dir": args.checkpoint_dir, "save_every": 1} if args.checkpoint_dir else {}
    ad = autodist.AutoDist(None, getattr(strategies, args.strategy)(), **extra)
    weights = (keras_job if args.keras else graph_job)(ad, args)
    say("RESULT " + json.dumps({"index": ad.worker_index, "weights": weights, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
