"""ResNet50's start and step under Keras ``fit`` on one node with two CPU replicas, against MirroredStrategy (issue 40).

    python benchmarks/startup_time.py                          # every configuration, 2 rounds
    python benchmarks/startup_time.py --configs mirrored AutoStrategy --rounds 1 --steps 8

The issue's first look, as a user runs it: ``keras.applications.ResNet50(
weights=None, input_shape=(32, 32, 3), classes=10)``, SGD, ``fit`` with a
global batch of 32 on synthetic data. Configurations, each a fresh process,
interleaved in rounds:

    single      one device, no distribution
    mirrored    tf.distribute.MirroredStrategy on two logical CPUs
    <builder>   AutoDist on a one-node spec with ``cpus: [0, 1]`` and that builder
                (AutoStrategy as a user makes it: it probes the node once, cached)

Columns (medians over the rounds): seconds from the process's start to the
end of its first training step, the median step of the ``--steps`` after the
first two, and both over MirroredStrategy's of the same round (issue 40:
AutoStrategy's start <= 1.0 x, its step <= 0.7 x), and the plan AutoStrategy
chose (each round's run also keeps its plan and rewrite seconds). JSON in
``benchmarks/results/<label>.json``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGS = ("single", "mirrored", "AutoStrategy", "PSLoadBalancing", "AllReduce")
MARK = "@@startup "
SPEC = "nodes:\n  - address: 127.0.0.1\n    cpus: [0, 1]\n"


def child(args):
    started = time.monotonic()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import keras
    import tensorflow as tf
    ends = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.monotonic())

    rng = np.random.RandomState(0)
    x = rng.rand(32 * args.steps, 32, 32, 3).astype("float32")
    y = rng.randint(0, 10, 32 * args.steps)

    def build():
        model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
        return model

    if args.child == "single":
        model = build()
    elif args.child == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            model = build()
    else:
        from autodist import AutoDist, strategies
        from step_time_roles import _PlanTimer
        timer = _PlanTimer()   # plan and rewrite seconds, and the plan AutoStrategy chose
        with AutoDist(args.spec, getattr(strategies, args.child)()).scope():
            model = build()
    model.fit(x, y, batch_size=32, epochs=1, callbacks=[Steps()], verbose=0)
    steps = [b - a for a, b in zip(ends[2:], ends[3:])]
    found = {"first_step_s": ends[0] - started, "step_ms": 1e3 * statistics.median(steps) if steps else None}
    if args.child not in ("single", "mirrored"):
        found.update({key: timer.facts[key] for key in ("plan_s", "transform_s", "chosen") if key in timer.facts})
    return found


def run(args, config, spec):
    argv = [sys.executable, os.path.abspath(__file__), "--child", config, "--steps", str(args.steps), "--spec", spec]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        return {"error": "exit {}: {}".format(done.returncode, done.stderr.strip()[-800:])}
    return json.loads(lines[-1][len(MARK):])


def summary(rounds, configs):
    rows = []
    for config in configs:
        found = [r[config] for r in rounds if "error" not in r.get(config, {"error": 1})]
        ratios = [(r[config]["first_step_s"] / r["mirrored"]["first_step_s"],
                   r[config]["step_ms"] / r["mirrored"]["step_ms"]) for r in rounds
                  if "error" not in r.get(config, {"error": 1}) and "error" not in r.get("mirrored", {"error": 1})]
        row = {"config": config, "runs": len(found),
               "errors": [r[config]["error"] for r in rounds if "error" in r.get(config, {})]}
        if found:
            row.update(first_step_s=statistics.median(f["first_step_s"] for f in found),
                       step_ms=statistics.median(f["step_ms"] for f in found))
            chosen = sorted({f["chosen"] for f in found if f.get("chosen")})
            if chosen:
                row["chosen"] = chosen   # the plans AutoStrategy chose over the rounds (one when they agreed)
        if ratios:
            row.update(start_vs_mirrored=statistics.median(r[0] for r in ratios),
                       step_vs_mirrored=statistics.median(r[1] for r in ratios))
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=16, help="steps of the one epoch")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--label", default="startup_time")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(MARK + json.dumps(child(args)), flush=True)
        return 0
    sys.path.insert(0, HERE)
    import _results
    configs = list(dict.fromkeys(["mirrored"] + args.configs))   # every ratio is to MirroredStrategy's
    load, rounds = os.getloadavg(), []
    with tempfile.TemporaryDirectory(prefix="startup-time-") as scratch:
        spec = os.path.join(scratch, "one_node_two_cpus.yml")
        with open(spec, "w") as handle:
            handle.write(SPEC)
        for index in range(1, args.rounds + 1):
            found = {}
            for config in configs if index % 2 else configs[::-1]:
                found[config] = run(args, config, spec)
                print("[round {}/{}] {}: {}".format(index, args.rounds, config, found[config]), flush=True)
            rounds.append(found)
    rows = summary(rounds, configs)
    print("\n{:<16} {:>14} {:>9} {:>12} {:>12}  {}".format("config", "to 1st step s", "step ms", "start/MS", "step/MS",
                                                          "chosen"))
    for r in rows:
        print("{:<16} {:>14} {:>9} {:>12} {:>12}  {}".format(r["config"], *("-" if r.get(k) is None else "{:.2f}".format(
            r[k]) for k in ("first_step_s", "step_ms", "start_vs_mirrored", "step_vs_mirrored")),
            ", ".join(r.get("chosen", ()))))
    _results.save(args.label, {"rows": rows, "rounds": rounds, "load_start": load, "load_end": os.getloadavg(),
                               "argv": sys.argv[1:] if argv is None else argv})
    return 0


if __name__ == "__main__":
    sys.exit(main())
