"""What synchronized batch norm costs a step: ResNet50 on two loopback nodes, sync_batch_norm on vs off.

    python benchmarks/sync_batch_norm.py [--rounds 2] [--builders AllReduce PSLoadBalancing] [--batch 16]

``keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)``, SGD, ``fit`` on 64
synthetic rows in global batches of ``--batch`` (each node a replica), two nodes on this machine
(``resource_specs/loopback_two_nodes.yml``). Per builder two configurations, ``off`` (per-replica
statistics) and ``on`` (``AutoDist(sync_batch_norm=True)``: every BatchNormalization synchronized, two
rounds forward and two backward per layer), each a fresh job, run one after the other in every round
(interleaved, so that the shared machine's drifts hit both alike), every process with
``TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=2``. A step is timed on the chief from
``on_train_batch_begin`` to ``on_train_batch_end``; the first epoch warms up, the median of the second's
steps is the run's figure. Printed and saved (``benchmarks/results/sync_batch_norm.json``): per builder
and configuration the median over rounds, and the ratio on / off of each round's figures (their median).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import save  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml")
ROWS = 64
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}


def role(args):
    """One node of one configuration: fit two epochs; the chief prints the second epoch's median step."""
    import keras
    import numpy as np
    import tensorflow as tf
    from autodist import AutoDist, strategies
    rng = np.random.RandomState(0)
    x, y = rng.rand(ROWS, 32, 32, 3).astype(np.float32), rng.randint(0, 10, ROWS).astype(np.int32)
    ad = AutoDist(SPEC, getattr(strategies, args.builder)(), sync_batch_norm=args.sync == "on")
    with tf.Graph().as_default(), ad.scope():
        keras.utils.set_random_seed(0)
        model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=keras.losses.SparseCategoricalCrossentropy())
    times = []

    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)
    model.fit(x, y, batch_size=args.batch, epochs=2, shuffle=False, verbose=0, callbacks=[StepTimer()])
    if ad.is_chief:
        measured = sorted(times[ROWS // args.batch:])
        print("STEP_MS {:.3f}".format(1000 * measured[len(measured) // 2]), flush=True)


def _run(builder, sync, args):
    """One configuration's job; the chief's median step time in ms."""
    env = dict(os.environ, **THREADS, PYTHONPATH=os.pathsep.join([ROOT] + sys.path[1:]))
    argv = [sys.executable, os.path.abspath(__file__), "--role", "--builder", builder, "--sync", sync,
            "--batch", str(args.batch)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout)
    found = [float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("STEP_MS")]
    if proc.returncode != 0 or not found:
        raise SystemExit("{} sync_batch_norm={} failed (exit {}):\n{}".format(
            builder, sync, proc.returncode, (proc.stdout + proc.stderr)[-3000:]))
    return found[0]


def harness(args):
    results = {builder: {"off": [], "on": []} for builder in args.builders}
    for round_index in range(args.rounds):
        for builder in args.builders:
            for sync in ("off", "on"):
                results[builder][sync].append(_run(builder, sync, args))
                print("round {} {:16s} sync_batch_norm {:3s} {:9.1f} ms/step".format(
                    round_index + 1, builder, sync, results[builder][sync][-1]), flush=True)
    summary = {}
    print("\nbuilder           off ms     on ms   on/off   (ResNet50 32x32, global batch {}, two loopback nodes, "
          "{} rounds)".format(args.batch, args.rounds))
    for builder, runs in results.items():
        ratios = [on / off for on, off in zip(runs["on"], runs["off"])]
        summary[builder] = {"off_ms": statistics.median(runs["off"]), "on_ms": statistics.median(runs["on"]),
                            "ratio": statistics.median(ratios), "rounds": runs}
        print("{:16s} {:8.1f} {:9.1f} {:8.2f}".format(builder, summary[builder]["off_ms"], summary[builder]["on_ms"],
                                                      summary[builder]["ratio"]))
    save("sync_batch_norm", {"batch": args.batch, "rows": ROWS, "load_average": os.getloadavg(),
                             "builders": summary})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--builders", nargs="+", default=["AllReduce", "PSLoadBalancing"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--role", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--builder", help=argparse.SUPPRESS)
    parser.add_argument("--sync", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        role(args)
    else:
        harness(args)


if __name__ == "__main__":
    main()
