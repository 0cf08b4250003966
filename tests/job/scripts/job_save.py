"""Every node saves a checkpoint, as in AutoDist's integration case c0 (run as a script by the chief).

    python job_save.py SPEC OUT --strategy BUILDER

Two steps of linear regression; then every node saves with the default
``autodist.checkpoint.Saver`` twice: under ``OUT/node<index>/model`` (its own
directory, as on a node without a shared filesystem) and under
``OUT/shared/model`` (all nodes at once, the same files). Each node prints
``RESULT <json>`` with its index, the paths ``save`` returned and its weights.
"""
import argparse
import json
import os
import sys

import numpy as np
import tensorflow as tf

import autodist
from autodist import strategies
from autodist.checkpoint import Saver


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("out")
    parser.add_argument("--strategy", default="PS")
    args = parser.parse_args()
    tf1 = tf.compat.v1
    ad = autodist.AutoDist(args.spec, getattr(strategies, args.strategy)())
    rng = np.random.RandomState(0)
    x_all, y_all = rng.rand(8, 3).astype(np.float32), rng.rand(8, 1).astype(np.float32)
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", initializer=tf.constant([[0.5], [-0.3], [0.2]]))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_mean(tf.square(tf.matmul(x, w) - y)))
        saver = Saver()
        sess = ad.create_distributed_session()
        for _ in range(2):
            sess.run(train, {x: x_all, y: y_all})
        own = saver.save(sess, os.path.join(args.out, "node{}".format(ad.worker_index), "model"), global_step=2)
        shared = saver.save(sess, os.path.join(args.out, "shared", "model"))
        result = {"index": ad.worker_index, "own": own, "shared": shared, "w": sess.run(w).ravel().tolist()}
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
