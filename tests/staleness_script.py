"""A two-node job whose second node is slow, for ``test_staleness.py`` (run as a script by the test).

    python staleness_script.py SPEC OUT_DIR (--staleness K | --async) [--steps N] [--sleep S]

The test starts the chief; the chief launches the other node, which runs this
same file with the same arguments. Every node trains a small linear model
with ``PS(sync=True, staleness=K)`` (or ``PS(sync=False)``) and appends one
line per step, ``<step> <start> <end>``, to ``OUT_DIR/node<worker index>.txt``
(times from ``time.monotonic()``, one clock for every process of the machine).
The non-chief sleeps ``S`` seconds between its steps, so the chief is the fast
node and must wait for it once it is K steps ahead.
"""
import argparse
import os
import time

import numpy as np
import tensorflow as tf

import autodist
from autodist.strategies import PS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("out_dir")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--staleness", type=int)
    mode.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.4)
    args = parser.parse_args()
    builder = PS(sync=False) if args.asynchronous else PS(sync=True, staleness=args.staleness)
    ad = autodist.AutoDist(args.spec, builder)
    tf1 = tf.compat.v1
    rs = np.random.RandomState(ad.worker_index)
    x_value = rs.rand(8, 3).astype(np.float32)
    y_value = x_value @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    path = os.path.join(args.out_dir, "node{}.txt".format(ad.worker_index))
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", initializer=tf.zeros([3, 1]))
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        session = ad.create_distributed_session()
        with open(path, "a") as log:
            for step in range(args.steps):
                start = time.monotonic()
                session.run(train, {x: x_value, y: y_value})
                end = time.monotonic()
                log.write("{} {!r} {!r}\n".format(step, start, end))
                log.flush()
                if not ad.is_chief:
                    time.sleep(args.sleep)


if __name__ == "__main__":
    main()
