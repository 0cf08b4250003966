"""An unmodified training script (no autodist import) whose every step reads other data: resumes are exact or wrong.

    python plain_steps.py RESULT --mode {feed,dataset,fit} [--steps N] [--sleep S] [--fail-at K] [--draws R]

``feed``: a tf.compat.v1 session loop fed through ``feed_dict``; ``dataset``:
the same loop reading a ``tf.data`` iterator (each of a node's ``--draws``
replicas draws its part of the node's share of a step, docs/input_pipelines.md); ``fit``: an eagerly compiled
Keras model trained by ``fit`` with shuffled batches over several epochs.
Step k trains on rows that no other step reads (momentum SGD, whose slots are
state too), so a resumed run that passes over a wrong number of steps, or
reads another step's batch, ends with other weights. The loops take this
node's share of the global batch (``AUTODIST_WORKER_INDEX`` /
``AUTODIST_NUM_WORKERS``, absent when run alone); ``fit``'s ``batch_size`` is
the global batch. Prints ``STEP <k>`` after each step of this run and writes
the final weights to RESULT-<worker index>.npz; ``--fail-at K`` raises after step K (a
crash), ``--sleep`` pauses after each step.
"""
import argparse
import os
import sys
import time

import numpy as np

BATCH, FEATURES = 8, 3


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def data(steps):
    rng = np.random.RandomState(0)
    x = rng.randn(steps * BATCH, FEATURES).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def my_rows():
    count = int(os.environ.get("AUTODIST_NUM_WORKERS", "1"))
    index = int(os.environ.get("AUTODIST_WORKER_INDEX", "0"))
    share = BATCH // count
    return slice(index * share, (index + 1) * share)


def after_step(args, done):
    say("STEP {}".format(done))
    if args.fail_at == done:
        raise RuntimeError("failing after step {} as asked".format(done))
    time.sleep(args.sleep)


def loop(args):
    import tensorflow as tf
    tf1 = tf.compat.v1
    x_all, y_all = data(args.steps)
    rows = my_rows()
    batches = [(x_all[k * BATCH:(k + 1) * BATCH][rows], y_all[k * BATCH:(k + 1) * BATCH][rows])
               for k in range(args.steps)]
    with tf.Graph().as_default():
        if args.mode == "dataset":   # every replica draws its part of this node's share of a step
            xs, ys = np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])
            dataset = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(len(batches[0][0]) // args.draws)
            x, y = tf1.data.make_one_shot_iterator(dataset).get_next()
        else:
            x = tf1.placeholder(tf.float32, [None, FEATURES])
            y = tf1.placeholder(tf.float32, [None, 1])
        w = tf1.get_variable("w", [FEATURES, 1], initializer=tf1.zeros_initializer())
        b = tf1.get_variable("b", [1], initializer=tf1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(x @ w + b - y))
        train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for k in range(args.steps):
                feed = {} if args.mode == "dataset" else {x: batches[k][0], y: batches[k][1]}
                sess.run([train, loss], feed)
                after_step(args, k + 1)
            return sess.run([w, b])


def fit(args):
    import keras

    class Steps(keras.callbacks.Callback):
        done = 0

        def on_train_batch_end(self, batch, logs=None):
            Steps.done += 1
            after_step(args, Steps.done)

    x, y = data(args.steps // 3)   # three epochs of steps // 3 batches, reshuffled at every epoch
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=True, verbose=0, callbacks=[Steps()])
    return model.get_weights()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result")
    parser.add_argument("--mode", choices=("feed", "dataset", "fit"), default="feed")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--fail-at", type=int, default=None)
    parser.add_argument("--draws", type=int, default=1, help="dataset: the replicas of a node (each draws a batch)")
    args = parser.parse_args()
    weights = fit(args) if args.mode == "fit" else loop(args)
    np.savez("{}-{}.npz".format(args.result, os.environ.get("AUTODIST_WORKER_INDEX", "0")),
             *[np.asarray(w) for w in weights])
    say("DONE")


if __name__ == "__main__":
    main()
