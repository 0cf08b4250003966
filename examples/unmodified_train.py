"""A plain tf.compat.v1 training script that knows nothing about autodist.

    python examples/unmodified_train.py --steps 20
    autodist run -r resource_specs/loopback_two_nodes.yml examples/unmodified_train.py --steps 20
    autodist run -r resource_specs/loopback_two_nodes.yml -s AllReduce \\
        examples/unmodified_train.py --session monitored --input dataset

It fits a small two-layer regression network to synthetic data (a fixed
seed, generated here) with Adam: the graph is built in a ``tf.Graph()``,
trained with ``tf.compat.v1.Session`` or ``MonitoredTrainingSession``, fed
through ``feed_dict`` or a ``tf.data`` pipeline.

Data sharding uses plain environment variables, which ``autodist run`` sets
on every node and which are absent when the script runs alone:
``AUTODIST_WORKER_INDEX``, ``AUTODIST_NUM_WORKERS`` and ``AUTODIST_NUM_REPLICAS``.
Each process trains on its slice of the global batch (slices of any number of
workers, weighed by their rows: ``build``), so the cluster together takes
exactly the steps one process takes on the whole batch. (A script that ignores them
trains every node on the same batch: still correct, the effective global
batch is then the per-node batch and each node's work is redundant.)

Each process prints ``step <i> loss <mean loss of its slice>`` and, at the
end, ``weights <json>`` with a checksum of every trained variable.

With ``--session monitored --checkpoint-dir DIR`` it saves a checkpoint every
``--save-steps`` steps and, started again, resumes from the newest one; it
stops at global step ``--steps``, so a run that was interrupted and resumed
(``autodist run --max-restarts N``) ends at the same step, with the same
``weights`` line, as one that was not.
"""
import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
BATCH, FEATURES, HIDDEN = 16, 4, 8


def make_data(seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(BATCH, FEATURES).astype(np.float32)
    true_w = rng.randn(FEATURES, 1).astype(np.float32)
    y = (np.tanh(x @ true_w) + 0.1 * rng.randn(BATCH, 1)).astype(np.float32)
    return x, y


def my_slice():
    """This process's rows of the global batch: in worker order, as equal as they can be (any number of workers)."""
    index = int(os.environ.get("AUTODIST_WORKER_INDEX", "0"))
    count = int(os.environ.get("AUTODIST_NUM_WORKERS", "1"))
    return slice(index * BATCH // count, (index + 1) * BATCH // count)


def build(inputs, targets, learning_rate):
    """``(the mean loss of these rows, the train op)``. The train op minimizes the rows' losses summed over the
    global batch, times the job's replicas (alone: the mean): each step's update is the mean of every replica's
    gradient, so every row weighs the same however the batch splits (16 rows over 3 workers: 5, 5, 6)."""
    init = tf1.glorot_uniform_initializer(seed=1)
    w1 = tf1.get_variable("dense1/kernel", [FEATURES, HIDDEN], initializer=init)
    b1 = tf1.get_variable("dense1/bias", [HIDDEN], initializer=tf1.zeros_initializer())
    w2 = tf1.get_variable("dense2/kernel", [HIDDEN, 1], initializer=init)
    hidden = tf.nn.relu(tf.matmul(inputs, w1) + b1)
    per_row = tf.reduce_mean(tf.square(tf.matmul(hidden, w2) - targets), axis=1)
    replicas = int(os.environ.get("AUTODIST_NUM_REPLICAS", "1"))
    global_step = tf1.train.get_or_create_global_step()
    train_op = tf1.train.AdamOptimizer(learning_rate).minimize(tf.reduce_sum(per_row) * (replicas / BATCH),
                                                               global_step=global_step)
    return tf.reduce_mean(per_row), train_op


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--session", choices=("plain", "monitored"), default="plain")
    parser.add_argument("--input", choices=("feed", "dataset"), default="feed")
    parser.add_argument("--checkpoint-dir", metavar="DIR",
                        help="with --session monitored: save checkpoints in DIR and resume from the newest one")
    parser.add_argument("--save-steps", type=int, default=5, help="steps between checkpoints (default: 5)")
    parser.add_argument("--step-sleep", type=float, default=0.0, metavar="S",
                        help="pause S seconds after each step (to watch or interrupt a run)")
    args = parser.parse_args()
    x_all, y_all = make_data()
    rows = my_slice()
    x_mine, y_mine = x_all[rows], y_all[rows]
    with tf.Graph().as_default():
        if args.input == "dataset":
            dataset = tf.data.Dataset.from_tensors((x_mine, y_mine)).repeat()
            inputs, targets = tf1.data.make_one_shot_iterator(dataset).get_next()
            feed = {}
        else:
            inputs = tf1.placeholder(tf.float32, [None, FEATURES], name="inputs")
            targets = tf1.placeholder(tf.float32, [None, 1], name="targets")
            feed = {inputs: x_mine, targets: y_mine}
        loss, train_op = build(inputs, targets, args.learning_rate)
        trained = tf1.trainable_variables()
        if args.session == "monitored":
            final = tf1.train.FinalOpsHook(trained)   # reads the variables when training ends
            hooks = [tf1.train.StopAtStepHook(last_step=args.steps), final]
            saving = dict(checkpoint_dir=args.checkpoint_dir, save_checkpoint_steps=args.save_steps,
                          save_checkpoint_secs=None) if args.checkpoint_dir else {}
            with tf1.train.MonitoredTrainingSession(hooks=hooks, **saving) as sess:
                step = 0   # of this run: a resumed run counts from 0 again
                while not sess.should_stop():
                    _, value = sess.run([train_op, loss], feed)
                    print("step {} loss {:.6f}".format(step, value), flush=True)
                    step += 1
                    time.sleep(args.step_sleep)
            values = final.final_ops_values
        else:
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                for step in range(args.steps):
                    _, value = sess.run([train_op, loss], feed)
                    print("step {} loss {:.6f}".format(step, value), flush=True)
                    time.sleep(args.step_sleep)
                values = sess.run(trained)
    checksum = {v.op.name: [float(np.sum(x)), float(np.sum(np.abs(x)))] for v, x in zip(trained, values)}
    # One string: print() writes its arguments separately, and the other nodes' lines may land between.
    print("weights " + json.dumps(checksum, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
