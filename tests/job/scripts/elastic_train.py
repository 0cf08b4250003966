"""An unmodified tf.compat.v1 script for elastic jobs under ``autodist run`` (no autodist import).

    python elastic_train.py --steps N [--checkpoint-dir DIR] [--step-sleep S]

Adam on a two-layer regression, a global batch of 12 rows of which each
process takes its share by ``AUTODIST_WORKER_INDEX`` / ``AUTODIST_NUM_WORKERS``
(any number of nodes: the loss is summed over the global batch, times
``AUTODIST_NUM_REPLICAS``, so shares that differ by a row weigh the same per row); ``MonitoredTrainingSession``
keeps checkpoints in DIR (only when the job stops, and at the end) and stops
at global step N. Every process prints ``node <i> of <n> step <global step>``
after each step and ``weights <json>`` at the end. Alone, it is the reference.
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
BATCH, FEATURES, HIDDEN = 12, 4, 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    x_all = rng.randn(BATCH, FEATURES).astype(np.float32)
    y_all = np.tanh(x_all @ rng.randn(FEATURES, 1).astype(np.float32)).astype(np.float32)
    index = int(os.environ.get("AUTODIST_WORKER_INDEX", "0"))
    count = int(os.environ.get("AUTODIST_NUM_WORKERS", "1"))
    rows = slice(index * BATCH // count, (index + 1) * BATCH // count)
    with tf.Graph().as_default():
        inputs = tf1.placeholder(tf.float32, [None, FEATURES])
        targets = tf1.placeholder(tf.float32, [None, 1])
        init = tf1.glorot_uniform_initializer(seed=1)
        w1 = tf1.get_variable("dense1/kernel", [FEATURES, HIDDEN], initializer=init)
        w2 = tf1.get_variable("dense2/kernel", [HIDDEN, 1], initializer=init)
        per_row = tf.square(tf.matmul(tf.nn.relu(tf.matmul(inputs, w1)), w2) - targets)[:, 0]
        replicas = int(os.environ.get("AUTODIST_NUM_REPLICAS", "1"))
        loss = tf.reduce_sum(per_row) * (replicas / BATCH)   # every row weighs the same, however the batch splits
        global_step = tf1.train.get_or_create_global_step()
        train = tf1.train.AdamOptimizer(0.05).minimize(loss, global_step=global_step)
        with tf.control_dependencies([train]):
            done = tf.identity(global_step.read_value())
        final = tf1.train.FinalOpsHook([w1, w2])
        saving = dict(checkpoint_dir=args.checkpoint_dir, save_checkpoint_secs=None) if args.checkpoint_dir else {}
        with tf1.train.MonitoredTrainingSession(hooks=[tf1.train.StopAtStepHook(last_step=args.steps), final],
                                                **saving) as sess:
            while not sess.should_stop():
                step = sess.run(done, {inputs: x_all[rows], targets: y_all[rows]})
                print("node {} of {} step {}".format(index, count, step), flush=True)
                time.sleep(args.step_sleep)
    checksum = {name: [float(np.sum(v)), float(np.sum(np.abs(v)))]
                for name, v in zip(("w1", "w2"), final.final_ops_values)}
    print("weights " + json.dumps(checksum, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
