"""Shared plumbing of the examples: command line, strategies by name, this node's share of a batch, loss logs.

Every example runs unchanged on one machine or on several: the chief (the
process you start) launches the other nodes of the resource spec, which run
the same script with the same arguments; each node feeds its own rows of
every global batch (``node_rows``) and only the chief writes files.

The console shows what the examples print on every node and a progress line
on the chief; ``quiet_start`` (called right after parsing the arguments,
before TensorFlow is imported) keeps TensorFlow's start-up messages off it,
and ``--verbose`` shows everything.
"""
import argparse
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SPEC = os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml")


def parser(description, strategy, steps, log_every=10):
    """An argument parser with the options every example shares."""
    args = argparse.ArgumentParser(description=description)
    args.add_argument("--spec", default=DEFAULT_SPEC, help="resource spec (default: two loopback nodes)")
    args.add_argument("--strategy", default=strategy, help="strategy builder name (default: %(default)s)")
    args.add_argument("--steps", type=int, default=steps, help="training steps (default: %(default)s)")
    args.add_argument("--log-every", type=int, default=log_every, help="print progress every N steps")
    args.add_argument("--trace-dir", default=None,
                      help="trace a few steps on every node into DIR/timeline.json (see docs/observability.md)")
    args.add_argument("--logdir", default=None, help="write TensorBoard scalars per node into DIR")
    args.add_argument("-v", "--verbose", action="store_true",
                      help="show everything every node prints, TensorFlow's start-up messages included")
    return args


def views(args):
    """AutoDist's options for the views the command line asked for (``--trace-dir``, ``--logdir``)."""
    return {"trace_dir": args.trace_dir, "logdir": args.logdir}


def quiet_start(args):
    """Keep TensorFlow's start-up messages off the console (unless ``--verbose``); call before importing it."""
    from autodist.runner.console import quiet_tensorflow_start
    quiet_tensorflow_start(verbose=args.verbose)


def autodist(args):
    """AutoDist on ``--spec`` under ``--strategy`` with the views asked for, and a progress line whose ETA
    counts ``--steps``."""
    from autodist import AutoDist
    return AutoDist(args.spec, strategy(args.strategy), verbose=args.verbose, progress=True, total_steps=args.steps,
                    **views(args))


def strategy(name):
    """A strategy builder from its class name, e.g. 'PS', 'AllReduce', 'Parallax'."""
    from autodist import strategies
    if name not in strategies.__all__:
        raise SystemExit("unknown strategy {!r}; choose from {}".format(name, ", ".join(strategies.__all__)))
    return getattr(strategies, name)()


def node_rows(ad, batch_size):
    """This node's slice of a global batch of ``batch_size`` rows: contiguous, in node order, as equal as they can
    be (any number of nodes takes the whole batch; parts differ by a row at most: weigh them with ``batch_loss``)."""
    index, count = ad.worker_index, ad.num_workers
    return slice(index * batch_size // count, (index + 1) * batch_size // count)


def batch_loss(ad, per_example, batch_size):
    """A replica's loss as its share of the global batch's mean: the sum of its per-example losses over
    ``batch_size``, times the job's replicas. A synchronous update is the mean of every replica's gradient, so
    every example of the global batch weighs the same however the rows split (a mean per replica would weigh
    the rows of a smaller part more)."""
    import tensorflow as tf
    return tf.reduce_sum(per_example) * (ad.num_replicas / batch_size)


def say(ad, text):
    """Print progress, prefixed with this node's index (the chief shows the other nodes' lines prefixed too)."""
    print("[node {}] {}".format(ad.worker_index, text), flush=True)


class LossLog:
    """Step and loss per line in ``<log_dir>/loss.log``, and ``<log_dir>/loss.png`` at the end (the chief only)."""

    def __init__(self, ad, log_dir):
        self.enabled = bool(log_dir) and ad.is_chief
        self.log_dir = log_dir
        self.points = []
        if self.enabled:
            os.makedirs(log_dir, exist_ok=True)
            self._file = open(os.path.join(log_dir, "loss.log"), "w")

    def add(self, step, loss):
        self.points.append((step, float(loss)))
        if self.enabled:
            self._file.write("{} {:.6f}\n".format(step, float(loss)))
            self._file.flush()

    def close(self, title):
        """Write the PNG; returns its path (None on other nodes or without a log directory)."""
        if not self.enabled:
            return None
        self._file.close()
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
        figure, axes = pyplot.subplots(figsize=(6, 4))
        axes.plot([s for s, _ in self.points], [v for _, v in self.points])
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.set_yscale("log")
        axes.set_title(title)
        figure.tight_layout()
        path = os.path.join(self.log_dir, "loss.png")
        figure.savefig(path, dpi=100)
        pyplot.close(figure)
        return path
