"""Predicted vs measured step time: the cost model against ``step_time.py``'s results (issue 14).

    python benchmarks/predict_step_time.py --measure --models tiny emb cnn mlp \
        --configs PS PSLoadBalancing PartitionedPS AllReduce Parallax AutoStrategy     # all in one run
    python benchmarks/predict_step_time.py benchmarks/results/step_time.json          # an earlier run

``--measure`` takes the calibration in the same run as the measurement, as
the machine's load moves both: it probes the cluster and measures every
model's compute (a child process pinned as the jobs are: itself on node 0's
core, the other node's server it starts on node 1's, ``--threads`` threads),
runs ``step_time.py``'s configurations (``--rounds``, interleaved), probes
again, and predicts with the median of the probes (each written to the probe
cache, so the AutoStrategy jobs plan with the run's own calibration). The
load average is printed and saved with every probe. Without ``--measure``,
the cached probe and compute are used.

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
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from step_time_models import MODELS, graph_logits, loss  # noqa: E402
from step_time_procs import _children, pin  # noqa: E402
from step_time_run import SPEC, VARIANTS  # noqa: E402

MARK = "PREDICT_STEP_TIME "
#: The presets the cost model is scored on (issue 14), and AutoStrategy.
CANDIDATE_CONFIGS = ("PS", "PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax", "AutoStrategy")


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


def predictions(model_name, builders, spec, directory, calibration=None):
    """``({builder: Prediction}, AutoResult, Compute)`` of one model on ``spec``."""
    from autodist import strategies
    from autodist.strategies.cost import cluster_calibration, measure_compute, predict
    from autodist.strategies.inputs import builder_variables
    model = MODELS[model_name]
    item = capture(model)
    compute = measure_compute(item, model.batch, directory=directory)
    calibration = calibration or cluster_calibration(spec, directory)
    variables = builder_variables(item)
    found = {}
    for name in builders:   # a preset, or a variant of one (``step_time_run.VARIANTS``: builder, arguments)
        builder, arguments = VARIANTS.get(name, (name, {}))
        found[name] = predict(getattr(strategies, builder)(**arguments).build(item, spec), variables, compute,
                              calibration, chief=spec.chief)
    auto = strategies.AutoStrategy(calibration=calibration, compute=compute).search(item, spec)
    return found, auto, compute


def _pin_children(core, stop):
    """Pin this process's descendants (the probe's other-node server) to ``core`` until ``stop`` is set."""
    while not stop.wait(0.1):
        children, pending, mine = _children(), [os.getpid()], []
        while pending:
            for child in children.get(pending.pop(), []):
                mine.append(child)
                pending.append(child)
        for pid in mine:
            pin(pid, {core})


def calibrate_child(args):
    """``--calibrate-child``: probe the spec and measure every model's compute, pinned as the jobs are."""
    import threading
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})
    stop = threading.Event()
    threading.Thread(target=_pin_children, args=(cores[-1], stop), daemon=True).start()
    from autodist.spec.resource_spec import ResourceSpec
    from autodist.strategies.cost import measure_compute, save_calibration
    from autodist.runtime.calibrate.probe import probe
    spec = ResourceSpec(args.spec)
    load = os.getloadavg()
    found = probe(spec, sink=sys.stderr)
    stop.set()
    save_calibration(spec, found, args.calibration_dir)
    for model in args.models:
        measure_compute(capture(MODELS[model]), MODELS[model].batch, directory=args.calibration_dir, use_cache=False)
    print(MARK + json.dumps({"calibration": found.to_dict(), "load": load}), flush=True)
    return 0


def _calibrate(args):
    """One pinned probe in a child process: ``{"calibration": {...}, "load": [...]}``."""
    argv = [sys.executable, os.path.abspath(__file__), "--calibrate-child", "--spec", args.spec, "--threads",
            str(args.threads), "--models"] + list(args.models)
    if args.calibration_dir:
        argv += ["--calibration-dir", args.calibration_dir]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [line[len(MARK):] for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError("the probe failed ({}): {}".format(done.returncode, done.stderr[-2000:]))
    found = json.loads(lines[-1])
    print("probe at load {:.2f}: {}".format(found["load"][0], json.dumps(
        {k: "{:.3g}".format(v) for k, v in found["calibration"].items() if isinstance(v, float)})), flush=True)
    return found


def median_calibration(probes):
    """Every field's median over the probes of a run."""
    from autodist.strategies.cost import Calibration
    fields = probes[0]["calibration"]
    return Calibration.from_dict({k: statistics.median(p["calibration"][k] for p in probes) if isinstance(v, float)
                                  else v for k, v in fields.items()})


def measure(args):
    """``--measure``: probe, run step_time.py's configurations, probe again; the results and the probes."""
    import step_time
    probes = [_calibrate(args)]
    bench = step_time.parse_args(["--models"] + args.models + ["--configs"] + args.configs + [
        "--rounds", str(args.rounds), "--threads", str(args.threads)])
    rows_of = {}
    step_time.run_all(bench, rows_of)
    probes.append(_calibrate(args))
    rows = step_time.add_ratios([step_time.summarize(model, config, runs, errors, bench.rounds)
                                 for (model, config), (runs, errors) in rows_of.items()])
    step_time.print_tables(rows, bench)
    return rows, probes


def table(rows):
    """Text lines of the comparison and the MAPE lines: over the five presets of issue 14, and over all."""
    lines = ["{:<6} {:<21} {:>10} {:>10} {:>8} {:>7}".format("model", "builder", "predicted", "measured", "error",
                                                             "comm")]
    errors = {}
    for row in rows:
        error = (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"] if row["measured_ms"] else None
        if error is not None:
            errors[row["model"], row["builder"]] = abs(error)
        lines.append("{:<6} {:<21} {:>10.2f} {:>10} {:>8} {:>6.0f}%".format(
            row["model"], row["builder"], row["predicted_ms"],
            "-" if row["measured_ms"] is None else "{:.2f}".format(row["measured_ms"]),
            "-" if error is None else "{:+.0%}".format(error), 100 * row["comm_share"]))
    presets = [e for (_, builder), e in errors.items() if builder in CANDIDATE_CONFIGS]
    mape = sum(presets) / len(presets) if presets else None
    lines.append("MAPE over the {} rows of the five presets: {}".format(len(presets), _percent(mape)))
    if len(errors) > len(presets):
        lines.append("MAPE over all {} rows: {}".format(len(errors), _percent(sum(errors.values()) / len(errors))))
    return lines, mape


def _percent(value):
    return "-" if value is None else "{:.1%}".format(value)


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", help="a JSON file written by step_time.py (without --measure)")
    parser.add_argument("--measure", action="store_true", help="probe, run the configurations, probe again")
    parser.add_argument("--calibrate-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=["tiny", "emb", "cnn", "mlp"])
    parser.add_argument("--configs", nargs="+", default=list(CANDIDATE_CONFIGS), help="step_time.py's configurations")
    parser.add_argument("--rounds", type=int, default=1, help="with --measure: step_time.py's rounds")
    parser.add_argument("--spec", default=SPEC, help="the resource spec the results were measured on")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads, as step_time.py's --threads")
    parser.add_argument("--calibration-dir", help="where the probe's cache is (default ~/.autodist/calibration, "
                                                  "which the AutoStrategy jobs read)")
    parser.add_argument("--label", default="predict_step_time", help="results file name")
    parser.add_argument("--results-dir", help="default: benchmarks/results")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.calibrate_child:
        return calibrate_child(args)
    if args.results_dir:
        _results.RESULTS_DIR = os.path.abspath(args.results_dir)
    if args.threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(args.threads)
    probes, calibration = [], None
    if args.measure:
        measured_rows, probes = measure(args)
        calibration = median_calibration(probes)
    else:
        with open(args.results) as handle:
            measured_rows = json.load(handle)["results"]["rows"]
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from autodist.spec.resource_spec import ResourceSpec
    rows, autos = compare(ResourceSpec(args.spec), measured_rows, args.calibration_dir, calibration)
    lines, mape = table(rows)
    print("\n".join(lines + auto_lines(autos, measured_rows)))
    _results.save(args.label, {"rows": rows, "mape": mape, "auto": autos, "load": os.getloadavg(),
                               "probes": probes, "measured": measured_rows})
    return 0


def compare(spec, measured_rows, directory, calibration):
    """Predicted vs measured rows of every measured preset, and AutoStrategy's search per model."""
    measured = {(r["model"], r["config"]): r["median_ms"] for r in measured_rows}
    rows, autos = [], {}
    for model in sorted({m for m, _ in measured}, key=list(MODELS).index):
        builders = [c for m, c in measured if m == model and (c in _builder_names() or c in VARIANTS)]
        found, auto, compute = predictions(model, builders, spec, directory, calibration)
        autos[model] = dict(auto.to_dict(), compute_ms=compute.step_s * 1e3)
        rows += [{"model": model, "builder": name, "predicted_ms": p.step_s * 1e3, "measured_ms": measured[model, name],
                  "comm_share": p.comm_share} for name, p in found.items()]
    return rows, autos


def auto_lines(autos, measured_rows):
    """Per model: AutoStrategy's choice, and its measured step against the best measured builder's."""
    lines = []
    for model, auto in autos.items():
        times = {r["config"]: r["median_ms"] for r in measured_rows if r["model"] == model and r["median_ms"]}
        line = "{}: one replica's step {:.2f} ms; AutoStrategy picks {} ({:.2f} ms predicted)".format(
            model, auto["compute_ms"], auto["chosen"], auto["predicted_step_ms"])
        builders = {c: t for c, t in times.items() if c in _builder_names()}
        if "AutoStrategy" in times and builders:
            best = min(builders, key=builders.get)
            line += "; measured {:.2f} ms = {:.2f}x the best builder ({} {:.2f} ms)".format(
                times["AutoStrategy"], times["AutoStrategy"] / builders[best], best, builders[best])
        lines.append(line)
    return lines


def _builder_names():
    from autodist.strategies import BUILDERS
    return set(BUILDERS) - {"AutoStrategy"}


if __name__ == "__main__":
    sys.exit(main())
