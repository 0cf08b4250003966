"""Linear regression, data-parallel: the smallest autodist program.

    python examples/linear_regression.py --log-dir runs/linear

learns y = 3 x0 - 2 x1 + 0.5 x2 + 1 (plus noise) from 4096 generated examples
on the two loopback nodes of resource_specs/loopback_two_nodes.yml, one
replica each, under parameter servers (``--strategy AllReduce`` and the others
work too; any number of nodes). Each node feeds its part of every global
batch of 64 (its half on two nodes), its loss weighed by its rows. The chief
writes ``loss.log`` (step, loss) and ``loss.png`` into ``--log-dir``. Expected:
the loss falls from ~14 to the noise floor (~0.01) and the weights end within
0.01 of the truth.
"""
import numpy as np

from common import LossLog, autodist, batch_loss, node_rows, parser, quiet_start, say

TRUE_W, TRUE_B = np.array([3.0, -2.0, 0.5], np.float32), 1.0
BATCH = 64


def data(examples=4096, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(examples, 3).astype(np.float32)
    y = (x @ TRUE_W + TRUE_B + 0.1 * rng.randn(examples)).astype(np.float32)
    return x, y.reshape(-1, 1)


def main():
    args = parser(__doc__.splitlines()[0], "PS", 200, log_every=25)
    args.add_argument("--log-dir", default="", help="write loss.log and loss.png here (the chief)")
    args = args.parse_args()
    quiet_start(args)
    import tensorflow as tf

    ad = autodist(args)
    x_all, y_all = data()
    rows = node_rows(ad, BATCH)
    log = LossLog(ad, args.log_dir)
    with tf.Graph().as_default(), ad.scope():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
        w = tf.Variable(tf.zeros([3, 1]), name="w")
        b = tf.Variable(tf.zeros([1]), name="b")
        errors = tf.square(tf.matmul(x, w) + b - y)[:, 0]        # per example: fetched for every replica
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(batch_loss(ad, errors, BATCH))
        session = ad.create_distributed_session()
        for step in range(1, args.steps + 1):
            start = (step - 1) * BATCH % len(x_all)
            batch = slice(start + rows.start, start + rows.stop)
            per_example, _ = session.run([errors, train], {x: x_all[batch], y: y_all[batch]})
            log.add(step, per_example.mean())
            ad.log_scalar("loss", per_example.mean())
            if step % args.log_every == 0 or step == 1:
                say(ad, "step {:4d}  loss {:.4f}".format(step, per_example.mean()))
        weights, bias = session.run([w, b])
    say(ad, "learned w = {} b = {:.3f} (true {} {})".format(np.round(weights[:, 0], 3), bias[0], TRUE_W, TRUE_B))
    error = max(np.abs(weights[:, 0] - TRUE_W).max(), abs(bias[0] - TRUE_B))
    say(ad, "max weight error {:.4f}".format(error))
    png = log.close("linear regression, {} on {}".format(args.strategy, ad.num_workers) + " nodes")
    if png:
        say(ad, "wrote {} and {}".format(png[:-3] + "log", png))


if __name__ == "__main__":
    main()
