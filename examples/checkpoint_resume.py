"""Save under one strategy, resume under another, and check against uninterrupted training.

    python examples/checkpoint_resume.py

runs three things: ``--phase train`` (40 steps under PS on the two loopback
nodes, then ``autodist.checkpoint.Saver`` writes a checkpoint; each node
writes it, here the same files), ``--phase resume`` (a new job under AllReduce restores it, the chief
reading the file and broadcasting the values, and trains 40 more steps, saving
again), and a plain single-device TensorFlow run of all 80 steps. The model is
an MLP of Keras layers on scikit-learn's digits with tf.compat.v1's Momentum
optimizer, so the checkpoint carries the momentum slots and a step counter. The
final checkpoint is read with a plain ``tf.compat.v1.train.Saver`` into the
single-device graph and compared with the uninterrupted run. Expected output
ends with ``resumed == uninterrupted: max difference 1.6e-07 over 9 variables: OK``
(any difference up to 1e-5 passes; about 35 s).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

from common import autodist, node_rows, parser, quiet_start, say

BATCH = 64


def digits():
    from sklearn.datasets import load_digits
    data = load_digits()
    return (data.data / 16.0).astype(np.float32), data.target.astype(np.int32)


def build(tf, keras, replicas=1):
    """The single-device graph: placeholders, an MLP of Keras layers, tf1 Momentum, a step counter.

    The counter is a plain non-trainable variable that every step increments
    (each replica its own copy, so every copy counts the steps). The loss is
    the sum over the global batch times the job's ``replicas`` (one device: the
    mean): every example weighs the same on any number of nodes
    (``common.batch_loss``).
    """
    keras.utils.set_random_seed(0)
    x = tf.compat.v1.placeholder(tf.float32, [None, 64], name="x")
    y = tf.compat.v1.placeholder(tf.int32, [None], name="y")
    hidden = keras.layers.Dense(32, activation="relu", name="hidden")
    logits = keras.layers.Dense(10, name="logits")
    per_example = keras.losses.sparse_categorical_crossentropy(y, logits(hidden(x)), from_logits=True)
    step = tf.Variable(0.0, trainable=False, name="step")
    loss = tf.reduce_sum(per_example) * (replicas / BATCH)
    minimize = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    with tf.control_dependencies([minimize]):
        train = step.assign_add(1.0).op
    return x, y, per_example, step, train


def batch_rows(step, count):
    start = step * BATCH % (count - BATCH + 1)
    return slice(start, start + BATCH)


def distributed(args, restore):
    import keras
    import tensorflow as tf
    from autodist.checkpoint import Saver

    ad = autodist(args)
    images, labels = digits()
    mine = node_rows(ad, BATCH)
    with tf.Graph().as_default(), ad.scope():
        x, y, per_example, step, train = build(tf, keras, ad.num_replicas)
        saver = Saver()
        session = ad.create_distributed_session()
        if restore:
            path = tf.train.latest_checkpoint(args.checkpoint_dir)
            saver.restore(session, path)
            say(ad, "restored {} at step {:.0f}".format(os.path.basename(path), session.run(step)))
        first = int(session.run(step))
        for s in range(first, first + args.steps):
            rows = batch_rows(s, len(images))
            rows = slice(rows.start + mine.start, rows.start + mine.stop)
            losses, _ = session.run([per_example, train], {x: images[rows], y: labels[rows]})
            ad.log_scalar("loss", losses.mean())
            if (s + 1) % args.log_every == 0:
                say(ad, "{} step {:3d}  loss {:.4f}".format(args.strategy, s + 1, losses.mean()))
        path = saver.save(session, os.path.join(args.checkpoint_dir, "model"), global_step=int(session.run(step)))
        say(ad, "saved {}{}".format(path, "" if ad.is_chief else " (written by the chief)"))


def uninterrupted(steps):
    """{op name: value} of every variable after ``steps`` plain single-device steps on the global batch."""
    import keras
    import tensorflow as tf
    images, labels = digits()
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        x, y, _, _, train = build(tf, keras)
        session.run(tf.compat.v1.global_variables_initializer())
        for s in range(steps):
            rows = batch_rows(s, len(images))
            session.run(train, {x: images[rows], y: labels[rows]})
        return {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}


def restored_plainly(checkpoint_dir):
    """The final checkpoint read by a plain tf1 Saver into the single-device graph."""
    import keras
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        build(tf, keras)
        tf.compat.v1.train.Saver().restore(session, tf.train.latest_checkpoint(checkpoint_dir))
        return {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}


def demo(args):
    directory = args.checkpoint_dir or tempfile.mkdtemp(prefix="autodist-resume-")
    common = [sys.executable, os.path.abspath(__file__), "--spec", args.spec, "--steps", str(args.steps),
              "--log-every", str(args.log_every), "--checkpoint-dir", directory] + (["--verbose"] if args.verbose else [])
    for phase, name in (("train", args.first), ("resume", args.second)):
        print("== {} under {} ==".format(phase, name), flush=True)
        subprocess.run(common + ["--phase", phase, "--strategy", name], check=True)
    print("== uninterrupted single-device run of {} steps ==".format(2 * args.steps), flush=True)
    expected, resumed = uninterrupted(2 * args.steps), restored_plainly(directory)
    worst = max(float(np.max(np.abs(np.asarray(resumed[k], np.float64) - expected[k]))) for k in expected)
    verdict = "OK" if sorted(resumed) == sorted(expected) and worst <= 1e-5 else "MISMATCH"
    print("resumed == uninterrupted: max difference {:.1e} over {} variables: {}".format(
        worst, len(expected), verdict), flush=True)
    return 0 if verdict == "OK" else 1


def main():
    args = parser(__doc__.splitlines()[0], "PS", 40)
    args.add_argument("--phase", choices=["demo", "train", "resume"], default="demo")
    args.add_argument("--checkpoint-dir", default="", help="where checkpoints go (demo: a new temporary directory)")
    args.add_argument("--first", default="PS", help="demo: strategy of the first half")
    args.add_argument("--second", default="AllReduce", help="demo: strategy of the second half")
    args = args.parse_args()
    quiet_start(args)
    if args.phase == "demo":
        return demo(args)
    if not args.checkpoint_dir:
        raise SystemExit("--phase {} needs --checkpoint-dir".format(args.phase))
    distributed(args, restore=args.phase == "resume")
    return 0


if __name__ == "__main__":
    sys.exit(main())
