"""An elastic API script: ``AutoDist(elastic=True, min_nodes=, checkpoint_dir=)``, a global batch split over the nodes.

    python job_elastic.py SPEC CKPT [--steps N] [--min-nodes K] [--step-sleep S] [--host-backoff S] [--alone]

A two-layer regression trained with AllReduce on a fixed global batch of 12
rows, each node taking its share by ``ad.worker_index`` / ``ad.num_workers``
(12 splits over 1, 2 and 3 nodes), until the global step reaches ``--steps``;
an attempt after a membership change resumes from the step its checkpoint
holds. Every node prints ``node <index of n> step <global step>`` after each
step it finished, and ``weights <json>`` (a checksum of every variable) at the
end. ``--alone``: no elasticity (the uninterrupted reference on one node).
"""
import argparse
import json
import sys
import time

import numpy as np
import tensorflow as tf

import autodist
from autodist import strategies

BATCH, FEATURES, HIDDEN = 12, 4, 8
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
    parser.add_argument("--min-nodes", type=int, default=1)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--host-backoff", type=float, default=600.0)
    parser.add_argument("--alone", action="store_true")
    args = parser.parse_args()
    elastic = {} if args.alone else dict(elastic=True, min_nodes=args.min_nodes, host_backoff=args.host_backoff,
                                         preemption_grace=60.0)
    ad = autodist.AutoDist(args.spec, strategies.AllReduce(), checkpoint_dir=args.checkpoint_dir, **elastic)
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
        with tf.control_dependencies([train]):
            done = tf.identity(global_step.read_value())
        sess = ad.create_distributed_session()
        step = int(sess.run(global_step))
        while step < args.steps:
            step = int(sess.run(done, {inputs: x_all[rows], targets: y_all[rows]}))
            sys.stdout.write("node {} of {} step {}\n".format(ad.worker_index, ad.num_workers, step))
            sys.stdout.flush()
            time.sleep(args.step_sleep)
        values = sess.run([w1, w2])
    checksum = {name: [float(np.sum(v)), float(np.sum(np.abs(v)))] for name, v in zip(("w1", "w2"), values)}
    sys.stdout.write("weights " + json.dumps(checksum, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
