"""A small linear-regression job for the job-level tests (run as a script by the chief).

    python job_linear.py SPEC [--strategy BUILDER] [--steps N] [--sleep S] [--seed K]
                              [--echo-env NAME ...] [--chief-pause-at K --chief-pause S]
                              [--chief-exit-at K --exit-code C [--loop-outside-scope]]
                              [--worker-fail-at-end [--fail-delay S]] [--worker-ignores-sigterm]
                              [--stall-timeout S] [--chief-reads N] [--ballast FLOATS] [--worker-lr LR]
                              [--late-node ADDRESS --late S [--late-until PATH]]

Every node takes its share of the global batch by ``ad.worker_index``, prints
``STEP <i>`` after each step and, at the end, ``RESULT <json>`` with its
index, the per-example losses of its share at every step, the final weights
and the values of the ``--echo-env`` variables. ``--sleep`` pauses the other
nodes (not the chief) after each step, so the chief spends its time blocked
in ``sess.run`` waiting for them; ``--chief-pause`` makes the chief sleep
(outside any session call, like a long evaluation) after step K.

Ways to end badly, for the tests of how a job ends: ``--chief-exit-at K``
makes the chief call ``sys.exit(C)`` after step K, inside ``ad.scope()`` or,
with ``--loop-outside-scope``, in a training loop after the scope (as
``ad.function`` scripts do); ``--worker-fail-at-end`` makes the other nodes
fail an assertion after their RESULT line (``--fail-delay`` seconds later);
``--worker-ignores-sigterm`` makes them ignore SIGTERM, so that stopping the
job takes the runner's whole grace period. ``--chief-reads N`` makes the chief
read the weights N times after each step: session calls the other nodes do
not make (a stall report must still see them at the same step). ``--ballast N``
adds a variable of N floats whose gradient is zero: N * 4 bytes more per
step on the wire, the weights unchanged (the straggler tests). ``--worker-lr``:
the other nodes build their optimizer with another learning rate than the
chief's (a job whose processes captured different graphs). ``--late-node``
starts that node ``--late`` s after the others, or (``--late-until``) once PATH
exists, at most ``--late`` s.
"""
import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

import autodist
from autodist import strategies

BATCH, FEATURES, LR = 12, 3, 0.1


def data(seed):
    rng = np.random.RandomState(seed)
    return rng.rand(BATCH, FEATURES).astype(np.float32), rng.rand(BATCH, 1).astype(np.float32)


def say(text):
    """One write per line: the chief's stdout also carries the other nodes' lines, written whole."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("--strategy", default="PS",
                        choices=("PS", "PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax", "AutoStrategy"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--echo-env", nargs="*", default=[])
    parser.add_argument("--chief-pause-at", type=int, default=-1)
    parser.add_argument("--chief-pause", type=float, default=0.0)
    parser.add_argument("--chief-exit-at", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--loop-outside-scope", action="store_true")
    parser.add_argument("--worker-fail-at-end", action="store_true")
    parser.add_argument("--fail-delay", type=float, default=0.0)
    parser.add_argument("--worker-ignores-sigterm", action="store_true")
    parser.add_argument("--stall-timeout", type=float, default=300.0)
    parser.add_argument("--chief-reads", type=int, default=0)
    parser.add_argument("--ballast", type=int, default=0)
    parser.add_argument("--worker-lr", type=float, default=LR)
    parser.add_argument("--late-node", default=None)
    parser.add_argument("--late", type=float, default=0.0)
    parser.add_argument("--late-until", default=None)
    args = parser.parse_args()
    if args.late_node and json.loads(os.environ.get("AUTODIST_JOB", "{}")).get("address") == args.late_node:
        deadline = time.monotonic() + args.late
        while time.monotonic() < deadline and not (args.late_until and os.path.exists(args.late_until)):
            time.sleep(0.1)
    tf1 = tf.compat.v1
    ad = autodist.AutoDist(args.spec, getattr(strategies, args.strategy)(), stall_timeout=args.stall_timeout)
    if args.worker_ignores_sigterm and not ad.is_chief:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    x_all, y_all = data(args.seed)
    share = BATCH // ad.num_workers
    rows = slice(ad.worker_index * share, (ad.worker_index + 1) * share)
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, FEATURES], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", initializer=tf.constant([[0.5], [-0.3], [0.2]]))
        per_example = tf.square(tf.matmul(x, w) - y)[:, 0]
        total = tf.reduce_mean(per_example)
        if args.ballast:
            total += 0.0 * tf.reduce_sum(tf1.get_variable("ballast", initializer=tf.zeros([args.ballast])))
        train = tf1.train.GradientDescentOptimizer(LR if ad.is_chief else args.worker_lr).minimize(total)
        sess = ad.create_distributed_session()
        if not args.loop_outside_scope:
            losses = train_loop(ad, sess, args, (train, per_example, w), {x: x_all[rows], y: y_all[rows]})
    if args.loop_outside_scope:
        losses = train_loop(ad, sess, args, (train, per_example, w), {x: x_all[rows], y: y_all[rows]})
    result = {"index": ad.worker_index, "num_workers": ad.num_workers, "losses": losses,
              "w": sess.run(w).ravel().tolist(), "env": {k: os.environ.get(k) for k in args.echo_env}}
    say("RESULT " + json.dumps(result))
    if args.worker_fail_at_end and not ad.is_chief:
        time.sleep(args.fail_delay)
        assert os.path.exists("/nonexistent/checked-file"), "the checked file is missing"


def train_loop(ad, sess, args, tensors, feed):
    train, per_example, w = tensors
    losses = []
    for step in range(args.steps):
        _, loss = sess.run([train, per_example], feed)
        losses.append(loss.tolist())
        say("STEP {}".format(step))
        for _ in range(args.chief_reads if ad.is_chief else 0):
            sess.run(w)
        if not ad.is_chief:
            time.sleep(args.sleep)
        elif step == args.chief_pause_at:
            say("PAUSE")
            time.sleep(args.chief_pause)
        if ad.is_chief and step == args.chief_exit_at:
            say("EXIT {}".format(args.exit_code))
            sys.exit(args.exit_code)
    return losses


if __name__ == "__main__":
    main()
