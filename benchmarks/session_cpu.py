"""One replica's training step, CPU per step, under the ways a TensorFlow process can run it (issue 40).

    python benchmarks/session_cpu.py                              # inception3, 200 interleaved steps each
    python benchmarks/session_cpu.py --family resnet101 --steps 100

On 8 emulated hosts sharing 2 cores a step's time follows the CPU its
processes spend, and MultiWorkerMirroredStrategy's workers spent less than
autodist's on the same bytes. This separates what the runtime costs from what
distribution adds: one process on one core, one replica, no cluster, the
family's step (``paper_models``, its per-replica batch, plain SGD) built once
per way and run interleaved, step by step, so a load that moves moves all of
them alike. Per step the process's CPU time (``time.process_time``: every
thread; a session's executor works while ``run`` waits) is what is compared.

    tf.function          MultiWorkerMirroredStrategy's worker without the strategy: the
                         family written eagerly, a constant batch, Keras SGD, TF's default Grappler
    tf1 default          a tf1 graph fed through placeholders (unknown batch dimension),
                         DirectSession, TF's default Grappler
    tf1 dependency       the same, only Grappler's dependency optimizer (autodist's multi-node
                         sessions: ``spec.cluster.node_config``)
    tf1 master           the same, on a local TensorFlow server (MasterSession, as autodist's
                         node sessions run)
    tf1 static ...       the placeholders with the batch dimension known

The JSON goes to ``benchmarks/results/<label>.json``.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

WAYS = ("tf.function", "tf1 default", "tf1 dependency", "tf1 master", "tf1 static default", "tf1 static dependency")


STEP_TIMEOUT_MS = 600_000   # a step that has not returned by then fails (nothing here waits on another process)


def _session_config(tf1, optimizers):
    config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1,
                             operation_timeout_in_ms=STEP_TIMEOUT_MS)
    if optimizers == "dependency":
        config.graph_options.rewrite_options.optimizers.append("dependency")
    return config


def tf1_step(tf, model, optimizers, static, target=""):
    """A tf1 session's step: ``() -> None``."""
    from step_time_models import graph_logits, loss, synthetic_batch
    from step_time_roles import _placeholders
    tf1 = tf.compat.v1
    x_np, y_np = synthetic_batch(model, model.batch, seed=0)
    graph = tf.Graph()
    with graph.as_default():
        tf1.set_random_seed(0)
        x, y = _placeholders(tf, model, model.batch if static else None)
        train = tf1.train.GradientDescentOptimizer(model.learning_rate).minimize(
            loss(model, graph_logits(model, x), y))
        init = tf1.global_variables_initializer()
    session = tf1.Session(target, graph=graph, config=_session_config(tf1, optimizers))
    session.run(init)
    feed = {x: x_np, y: y_np}
    return lambda: session.run(train, feed)


def function_step(tf, model):
    """MultiWorkerMirroredStrategy's worker step without the strategy: ``() -> None``."""
    import keras
    from step_time_models import eager_model, loss, synthetic_batch
    x, y = (tf.constant(a) for a in synthetic_batch(model, model.batch, seed=0))
    forward, variables = eager_model(model, x)
    optimizer = keras.optimizers.SGD(model.learning_rate)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            value = loss(model, forward(x), y)
        optimizer.apply_gradients(zip(tape.gradient(value, variables), variables))
        return value
    return lambda: step().numpy()


def measure(args):
    """``{way: [CPU s of each timed step]}``, the ways interleaved step by step."""
    import tensorflow as tf
    from step_time_models import model_named
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = model_named(args.family)
    server = tf.distribute.Server.create_local_server(config=_session_config(tf.compat.v1, "dependency"))
    steps = {"tf.function": function_step(tf, model),
             "tf1 default": tf1_step(tf, model, "default", False),
             "tf1 dependency": tf1_step(tf, model, "dependency", False),
             "tf1 master": tf1_step(tf, model, "dependency", False, server.target),
             "tf1 static default": tf1_step(tf, model, "default", True),
             "tf1 static dependency": tf1_step(tf, model, "dependency", True)}
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    cpu = {way: [] for way in steps}
    for _ in range(args.steps):
        for way, step in steps.items():
            started = time.process_time()
            step()
            cpu[way].append(time.process_time() - started)
    return cpu


def _families():
    from step_time_models import MODELS
    from paper_models import FAMILIES
    return sorted(set(MODELS) | set(FAMILIES))


def _at_least(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError("{} is below {}".format(value, low))
        return value
    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="inception3", choices=_families(),
                        help="a model of step_time_models or paper_models (default inception3)")
    parser.add_argument("--steps", type=_at_least(1), default=200, help="timed steps of each way, interleaved")
    parser.add_argument("--warmup", type=_at_least(0), default=10, help="untimed steps of each way first")
    parser.add_argument("--label", default="session_cpu")
    parser.add_argument("--results-dir", help="default: benchmarks/results")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})   # one core, every thread TensorFlow starts too
    import _results
    if args.results_dir:
        _results.RESULTS_DIR = args.results_dir
    load = os.getloadavg()
    cpu = measure(args)
    base = statistics.median(cpu["tf1 master"])
    rows = [{"way": way, "median_cpu_ms": 1e3 * statistics.median(values), "mean_cpu_ms": 1e3 * statistics.mean(values),
             "vs_master": statistics.median(values) / base} for way, values in cpu.items()]
    print("{} ({} steps each, interleaved, one thread)".format(args.family, args.steps))
    print("{:<24} {:>14} {:>12} {:>12}".format("way", "median CPU ms", "mean CPU ms", "x master"))
    for row in rows:
        print("{:<24} {:>14.2f} {:>12.2f} {:>12.2f}".format(row["way"], row["median_cpu_ms"], row["mean_cpu_ms"],
                                                          row["vs_master"]))
    _results.save(args.label, {"family": args.family, "steps": args.steps, "rows": rows, "load_start": load,
                               "load_end": os.getloadavg(), "argv": sys.argv[1:] if argv is None else argv})
    return 0


if __name__ == "__main__":
    sys.exit(main())
