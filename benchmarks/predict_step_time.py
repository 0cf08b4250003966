"""Predicted vs measured step time: the cost model against ``step_time.py``'s results (issue 14).

    python benchmarks/step_time.py --models mlp cnn emb --configs PS PSLoadBalancing PartitionedPS AllReduce Parallax
    autodist calibrate -r resource_specs/loopback_two_nodes.yml
    python benchmarks/predict_step_time.py benchmarks/results/step_time.json

For every model of the measured results, the model's graph is captured here
(``step_time_models``, the graph the benchmark's autodist jobs train), one
replica's step is measured as the jobs run it (``--threads`` TensorFlow threads,
this process pinned to one core, per-worker batch), the calibration is the
probe's cache for the spec (else its prior), and every measured builder's plan
is priced by ``autodist.strategies.cost.predict``. The table gives predicted and
measured median ms, the error of each, the mean absolute percentage error
(MAPE) over all rows, and AutoStrategy's choice with its prediction; the JSON
goes to ``benchmarks/results/<label>.json``.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from step_time_models import MODELS, graph_logits, loss  # noqa: E402
from step_time_run import SPEC  # noqa: E402


def capture(model):
    """The GraphItem of ``model``'s training graph (placeholders x, y; plain SGD)."""
    import tensorflow as tf
    from autodist.capture.graph_item import GraphItem
    from autodist.capture.optimizers import capture_optimizers
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            x = tf1.placeholder(tf.int64 if model.input_ids else tf.float32, (None,) + model.input_shape, name="x")
            y = tf1.placeholder(tf.int64 if model.classes else tf.float32, (None,) if model.classes else (None, 1),
                                name="y")
            tf1.train.GradientDescentOptimizer(model.learning_rate).minimize(loss(model, graph_logits(model, x), y))
    item.prepare()
    return item


def predictions(model_name, builders, spec, directory):
    """``({builder: Prediction}, AutoResult, Compute)`` of one model on ``spec``."""
    from autodist import strategies
    from autodist.strategies.cost import cluster_calibration, measure_compute, predict
    from autodist.strategies.inputs import builder_variables
    model = MODELS[model_name]
    item = capture(model)
    compute = measure_compute(item, model.batch, directory=directory)
    calibration = cluster_calibration(spec, directory)
    variables = builder_variables(item)
    found = {name: predict(getattr(strategies, name)().build(item, spec), variables, compute, calibration)
             for name in builders}
    auto = strategies.AutoStrategy(calibration=calibration, compute=compute).search(item, spec)
    return found, auto, compute


def table(rows):
    """Text lines of the comparison and the MAPE line."""
    lines = ["{:<6} {:<16} {:>10} {:>10} {:>8} {:>7}".format("model", "builder", "predicted", "measured", "error",
                                                             "comm")]
    errors = []
    for row in rows:
        error = (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"] if row["measured_ms"] else None
        if error is not None:
            errors.append(abs(error))
        lines.append("{:<6} {:<16} {:>10.2f} {:>10} {:>8} {:>6.0f}%".format(
            row["model"], row["builder"], row["predicted_ms"],
            "-" if row["measured_ms"] is None else "{:.2f}".format(row["measured_ms"]),
            "-" if error is None else "{:+.0%}".format(error), 100 * row["comm_share"]))
    mape = sum(errors) / len(errors) if errors else None
    lines.append("MAPE over {} rows: {}".format(len(errors), "-" if mape is None else "{:.1%}".format(mape)))
    return lines, mape


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a JSON file written by step_time.py")
    parser.add_argument("--spec", default=SPEC, help="the resource spec the results were measured on")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads, as step_time.py's --threads")
    parser.add_argument("--calibration-dir", help="where the probe's cache is (default ~/.autodist/calibration)")
    parser.add_argument("--label", default="predict_step_time", help="results file name")
    parser.add_argument("--results-dir", help="default: benchmarks/results")
    args = parser.parse_args(argv)
    if args.results_dir:
        _results.RESULTS_DIR = os.path.abspath(args.results_dir)
    if args.threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(args.threads)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from autodist.spec.resource_spec import ResourceSpec
    spec = ResourceSpec(args.spec)
    with open(args.results) as handle:
        measured = {(r["model"], r["config"]): r["median_ms"] for r in json.load(handle)["results"]["rows"]}
    rows, autos = [], {}
    for model in sorted({m for m, _ in measured}, key=list(MODELS).index):
        builders = [c for m, c in measured if m == model and c in _builder_names()]
        found, auto, compute = predictions(model, builders, spec, args.calibration_dir)
        autos[model] = dict(auto.to_dict(), compute_ms=compute.step_s * 1e3)
        rows += [{"model": model, "builder": name, "predicted_ms": p.step_s * 1e3, "measured_ms": measured[model, name],
                  "comm_share": p.comm_share} for name, p in found.items()]
    lines, mape = table(rows)
    print("\n".join(lines))
    for model, auto in autos.items():
        print("{}: one replica's step {:.2f} ms; AutoStrategy picks {} ({:.2f} ms predicted)".format(
            model, auto["compute_ms"], auto["chosen"], auto["predicted_step_ms"]))
    _results.save(args.label, {"rows": rows, "mape": mape, "auto": autos, "load": os.getloadavg()})
    return 0


def _builder_names():
    from autodist.strategies import BUILDERS
    return set(BUILDERS) - {"AutoStrategy"}


if __name__ == "__main__":
    sys.exit(main())
