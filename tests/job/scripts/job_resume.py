"""An API script that survives a failed node: ``AutoDist(max_restarts=, checkpoint_dir=, save_every=)``.

    python job_resume.py SPEC CKPT [--steps N] [--save-every K] [--max-restarts R] [--min-nodes M]
                                   [--step-sleep S]

A two-layer regression trained with AllReduce on a fixed global batch, each
node taking its share by ``ad.worker_index`` / ``ad.num_workers``, until the
global step reaches ``--steps``; a restarted attempt resumes from the step
its checkpoint holds. The chief prints ``step <global step> loss <loss>``
after each step, every node ``weights <json>`` (a checksum of every
variable) at the end. Run on one node it is the uninterrupted reference.
"""
import argparse
import json
import sys
import time

import numpy as np
import tensorflow as tf

import autodist
from autodist import strategies

BATCH, FEATURES, HIDDEN = 16, 4, 8
tf1 = tf.compat.v1


def data():
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, FEATURES).astype(np.float32)
    y = np.tanh(x @ rng.randn(FEATURES, 1).astype(np.float32)).astype(np.float32)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--min-nodes", type=int, default=None)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()
    ad = autodist.AutoDist(args.spec, strategies.AllReduce(), max_restarts=args.max_restarts, restart_backoff=1.0,
                           min_nodes=args.min_nodes, checkpoint_dir=args.checkpoint_dir, save_every=args.save_every)
    x_all, y_all = data()
    share = BATCH // ad.num_workers
    rows = slice(ad.worker_index * share, (ad.worker_index + 1) * share)
    with tf.Graph().as_default(), ad.scope():
        inputs = tf1.placeholder(tf.float32, [None, FEATURES])
        targets = tf1.placeholder(tf.float32, [None, 1])
        init = tf1.glorot_uniform_initializer(seed=1)
        w1 = tf1.get_variable("dense1/kernel", [FEATURES, HIDDEN], initializer=init)
        w2 = tf1.get_variable("dense2/kernel", [HIDDEN, 1], initializer=init)
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(inputs, w1)), w2) - targets))
        global_step = tf1.train.get_or_create_global_step()
        train = tf1.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)
        sess = ad.create_distributed_session()
        step = int(sess.run(global_step))
        while step < args.steps:
            _, value = sess.run([train, loss], {inputs: x_all[rows], targets: y_all[rows]})
            step += 1
            if ad.is_chief:
                sys.stdout.write("step {} loss {:.6f}\n".format(step, value))
                sys.stdout.flush()
            time.sleep(args.step_sleep)
        values = sess.run([w1, w2])
    checksum = {name: [float(np.sum(v)), float(np.sum(np.abs(v)))] for name, v in zip(("w1", "w2"), values)}
    sys.stdout.write("weights " + json.dumps(checksum, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
