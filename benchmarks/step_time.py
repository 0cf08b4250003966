"""Step time of autodist's strategy builders against hand-written baselines (issue 13).

    python benchmarks/step_time.py --quick                   # tiny model, 5 configurations, 1 round: < 2 min
    python benchmarks/step_time.py                           # everything, 3 rounds (35-45 min, quiet machine)
    python benchmarks/step_time.py --models mlp --configs hand_ps PSLoadBalancing --rounds 1
    python benchmarks/step_time.py --package-root DIR --label before   # measure another checkout's autodist

Models (``step_time_models``, per-worker batch, global = 2x): mlp 4096 -> 2048 x5
-> 10 (25.2 M parameters, batch 32), cnn 32x32x3 -> three 3x3 conv + pool ->
192 -> 10 (0.49 M, batch 32), emb a 1M x 64 table, 16 ids per example, mean ->
64 -> 1 (batch 256), tiny 10 -> 1 (batch 8). Plain SGD 0.01, one fixed
synthetic batch per node.

Configurations (``--configs``; ``step_time_roles`` has the processes):
    PS ... Parallax,  every autodist builder with its default arguments, through
    AutoStrategy      ``AutoDist(resource_specs/loopback_two_nodes.yml, Builder())``;
                      ``AutoStrategy(batch=<the model's batch>)``
    hand_ps           TF1 parameter server by hand: 1 PS process (node 0) + 2 workers,
                      a ConditionalAccumulator per variable, a token queue per worker
    mwms, mwms_25mib  MultiWorkerMirroredStrategy, RING, one pack / 25 MiB packs, Keras 3
    single            one process, 2 threads on both cores, the global batch
    AllReduce_fp16,   AllReduce with the opt-in compressors HorovodCompressor (float16 on
    AllReduce_powersgd  the wire) and PowerSGDCompressor (rank 1), next to the plain one
    PS_proxy,         PS and PSLoadBalancing with ``local_proxy_variable=True``: every node
    PSLoadBalancing_proxy  reads a copy of the variables another node holds
    PS_adam, PSLoadBalancing_adam, AllReduce_adam
                      those builders training with Keras 3 Adam instead of SGD (its update is
                      a dozen ops a variable); their losses differ from SGD's
    AllReduce_k4, _k16, AllReduce and PSLoadBalancing accumulating gradients over 4 or 16
    PSLoadBalancing_k4, _k16  calls (``AutoDist(accumulation_steps=k)``): a timed step is one
                      call (one batch per worker); k-1 of every k only add to the accumulators,
                      so the mean (``mean ms``) is the time per batch and ``sent/wstep`` per
                      batch; use --steps a multiple of 16 (and --warmup 16)

The baselines train exactly like single-device SGD on the global batch (the
variables agreed to 1e-8 after three steps when this was written). They run
with TensorFlow's default graph optimizations (grappler), as a user would;
autodist runs only grappler's dependency optimizer (``autodist/spec/cluster.py``).

Every configuration is a real two-node job on loopback (127.0.0.1 and
127.0.0.2, fresh ports), started by this harness and stopped by it: worker 0
runs ``--warmup`` untimed and ``--steps`` timed steps and reports their wall
times on stdout (see ``step_time_roles`` for the protocol). Rounds interleave
the configurations (``--rounds``: every model and configuration once per
round), so drift hits all alike; median and p90 are over every timed step of
every round. The load average at start and end is printed and saved.

Same thread settings for all: every process gets ``TF_NUM_INTRAOP_THREADS``
and ``TF_NUM_INTEROP_THREADS`` = ``--threads`` (default 1; the single
reference gets twice that). TensorFlow reads them whenever a ConfigProto or
the eager context leaves the thread counts at 0 (checked on TF 2.21: sessions,
``tf.distribute.Server``, eager); the baselines leave them at 0 and so does
autodist (``cluster.node_config``), whose launched processes inherit the
chief's environment. ``--pin`` (default on) pins node k's processes to core k
(all threads, see ``step_time_procs``): the harness pins what it starts, and
the processes autodist's chief starts (its other node's server and script)
are found as the chief's descendants and pinned to node 1's core, which
assumes the two-node loopback spec (the chief is node 0, the other node
node 1). With ``--no-pin`` the kernel schedules freely.

Columns: median / p90 ms of worker 0's steps; ``sent/wstep``: bytes sent over
TCP by all processes of the job during the timed steps (``ss -tinp`` counters,
see ``step_time_procs``) per step and per worker; ``x-node``: the part that
crossed between the nodes; ``CPU ms/step``: utime + stime of every process of
the job over the timed steps, per step (counted in clock ticks of 10 ms, so
short runs of fast models read coarse; ``cpu_s_per_step`` in the JSON, in
seconds); ``loss``: worker 0's loss on its batch after the last timed step
(autodist configurations: next to AllReduce's, what compression costs in
accuracy; the median over the rounds); ``ratio``: median over the best
baseline's median (the smallest of hand_ps, mwms, mwms_25mib). Results go to
``benchmarks/results/<label>.json``. A configuration that fails or exceeds
``--timeout`` is reported in its row (``errors``) and the run goes on; every
process it started is killed by pid, also on Ctrl-C.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from step_time_models import MODELS, param_count  # noqa: E402
from step_time_run import BASELINES, BUCKETS, CONFIGS, SPEC, WORKERS, RunFailed, child_env, run_config  # noqa: E402

QUICK = {"models": ["tiny"], "configs": ["hand_ps", "mwms", "single", "PS", "AllReduce"], "warmup": 3,
         "steps": 20, "rounds": 1, "timeout": 150.0}
FULL = {"models": list(MODELS), "configs": [c for c in CONFIGS if c not in BUCKETS], "warmup": 10, "steps": None,
        "rounds": 3, "timeout": 600.0}


def summarize(model, config, runs, errors, rounds):
    """One result row from the successful runs of every round."""
    row = {"model": model, "config": config, "median_ms": None, "p90_ms": None, "mean_ms": None, "bytes_per_step": None,
           "cross_node_bytes_per_step": None, "cpu_s_per_step": None, "ratio": None, "steps": 0,
           "rounds": len(runs), "rounds_planned": rounds, "errors": errors, "loss": None}
    if not runs:
        return row
    ms = [t for run in runs for t in run["ms"]]
    workers = 1 if config == "single" else WORKERS
    p90 = statistics.quantiles(ms, n=10, method="inclusive")[-1] if len(ms) > 1 else ms[0]
    row.update(median_ms=statistics.median(ms), p90_ms=p90, mean_ms=statistics.mean(ms),
               steps=len(ms), cpu_s_per_step=sum(r["cpu_s"] for r in runs) / len(ms),
               bytes_per_step=sum(r["sent"] for r in runs) / len(ms) / workers,
               cross_node_bytes_per_step=sum(r["cross_node"] for r in runs) / len(ms) / workers)
    losses = [r["loss"] for r in runs if r.get("loss") is not None]
    row["loss"] = statistics.median(losses) if losses else None
    return row


def add_ratios(rows):
    """Each row's median over its model's best baseline median (None without a baseline)."""
    for model in {row["model"] for row in rows}:
        best = [r["median_ms"] for r in rows if r["model"] == model and r["config"] in BASELINES and r["median_ms"]]
        for row in rows:
            if row["model"] == model and best and row["median_ms"] is not None:
                row["ratio"] = row["median_ms"] / min(best)
    return rows


def _count(value, units=(("G", 1e9), ("M", 1e6), ("k", 1e3)), suffix=""):
    """``25.2 M``, ``489 k``, ``11``: three significant digits, SI prefix."""
    for unit, scale in units:
        if value >= scale:
            return "{:.3g} {}{}".format(value / scale, unit, suffix)
    return "{:.0f}{}".format(value, " " + suffix if suffix else "")


def _size(count):
    return "-" if count is None else _count(count, suffix="B")


def _number(value, fmt):
    return "-" if value is None else fmt.format(value)


def print_tables(rows, args):
    head = "{:<22} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>6} {:>6} {:>10}".format(
        "config", "median ms", "p90 ms", "mean ms", "sent/wstep", "x-node", "CPU ms/step", "ratio", "steps", "loss")
    for model in args.models:
        spec = MODELS[model]
        print("\n{}: {} parameters, batch {} per worker (global {}); threads per process: {}; {}".format(
            model, _count(param_count(spec)), spec.batch, spec.batch * WORKERS, args.threads or "TensorFlow's default",
            "pinned" if args.pin else "not pinned"))
        print(head)
        for row in (r for r in rows if r["model"] == model):
            print("{:<22} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>6} {:>6} {:>10}".format(
                row["config"], _number(row["median_ms"], "{:.2f}"), _number(row["p90_ms"], "{:.2f}"),
                _number(row["mean_ms"], "{:.2f}"),
                _size(row["bytes_per_step"]), _size(row["cross_node_bytes_per_step"]),
                _number(row["cpu_s_per_step"] and row["cpu_s_per_step"] * 1e3, "{:.2f}"),
                _number(row["ratio"], "{:.2f}"), row["steps"], _number(row["loss"], "{:.4g}")))
            for error in row["errors"]:
                print("    ! {}".format(error if len(error) < 400 else error[:400] + " ..."))


def versions(args):
    """Versions of what the children run (their PYTHONPATH decides which autodist)."""
    code = ("import importlib.metadata as m, json, sys, autodist\n"
            "def v(*names):\n"
            "    for n in names:\n"
            "        try:\n"
            "            return m.version(n)\n"
            "        except m.PackageNotFoundError:\n"
            "            pass\n"
            "print(json.dumps({'python': sys.version.split()[0], 'tensorflow': v('tensorflow-cpu', 'tensorflow'),"
            " 'keras': v('keras'), 'numpy': v('numpy'), 'autodist': autodist.__version__,"
            " 'autodist_path': autodist.__path__[0]}))")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=child_env(args, "single"), capture_output=True,
                             text=True, timeout=60, check=True).stdout
        found = json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": "cannot read the versions: {}".format(e)}
    found["commit"] = _git(args.package_root, "rev-parse", "HEAD")
    found["uncommitted_changes"] = bool(_git(args.package_root, "status", "--porcelain", "--untracked-files=no"))
    return found


def _git(root, *argv):
    """Output of ``git -C root ...``, None where it cannot run (not a checkout, no git)."""
    try:
        return subprocess.run(["git", "-C", root] + list(argv), capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny model; hand_ps, mwms, single, PS, AllReduce; 20 steps; 1 round (under 2 minutes)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), help="default: all (--quick: tiny)")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), help="default: all")
    parser.add_argument("--rounds", type=int, help="rounds over all configurations (default 3, --quick 1)")
    parser.add_argument("--steps", type=int, help="timed steps per run (default: per model, 30 to 200)")
    parser.add_argument("--warmup", type=int, help="untimed steps before them (default 10, --quick 3)")
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per process (0: TF's)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="pin node k's processes to core k (default: on)")
    parser.add_argument("--timeout", type=float, help="s one run of one configuration may take (default 600)")
    parser.add_argument("--package-root", default=REPO, help="checkout whose autodist the jobs run (default: this)")
    parser.add_argument("--label", default="step_time", help="results file name (default: step_time)")
    parser.add_argument("--results-dir", help="default: benchmarks/results")
    return parser


def parse_args(argv):
    args = _parser().parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.package_root = os.path.abspath(args.package_root)
    args.cores = sorted(os.sched_getaffinity(0))
    return args


def run_all(args, rows_of):
    """Every round over every model and configuration; ``rows_of`` collects (runs, errors) per pair."""
    total = args.rounds * len(args.models) * len(args.configs)
    index = 0
    for round_index in range(1, args.rounds + 1):
        for model in args.models:
            for config in args.configs:
                index += 1
                print("[round {}/{}, run {}/{}] {} {} ...".format(round_index, args.rounds, index, total, model,
                                                                 config), end=" ", flush=True)
                started = time.monotonic()
                runs, errors = rows_of.setdefault((model, config), ([], []))
                try:
                    result = run_config(model, config, args)
                except (RunFailed, OSError, subprocess.SubprocessError, ValueError) as e:
                    errors.append("round {}: {}".format(round_index, e))
                    print("FAILED after {:.0f} s: {}".format(time.monotonic() - started, e), flush=True)
                    continue
                runs.append(result)
                errors.extend("round {}: {}".format(round_index, note) for note in result["notes"])
                print("median {:.2f} ms ({:.0f} s)".format(statistics.median(result["ms"]),
                                                           time.monotonic() - started), flush=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--role"]:
        from step_time_roles import main as role_main
        return role_main(argv[1:])
    args = parse_args(argv)
    if args.results_dir:
        _results.RESULTS_DIR = os.path.abspath(args.results_dir)
    load = os.getloadavg()
    print("load average {:.2f} {:.2f} {:.2f} (1, 5, 15 min) on {} cores{}".format(
        *load, os.cpu_count(), "; the machine is busy: figures will be noisy" if load[0] > 0.5 else ""))
    machine = {"cores": os.cpu_count(), "affinity": args.cores, "load_start": load, "versions": versions(args)}
    found = machine["versions"]
    print("autodist from {} (commit {}{})".format(found.get("autodist_path"), found.get("commit"),
                                                 ", with uncommitted changes" if found.get("uncommitted_changes") else ""))
    previous = signal.signal(signal.SIGTERM, _interrupt)
    rows_of, started, interrupted = {}, time.monotonic(), False
    try:
        run_all(args, rows_of)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: every process of the run was stopped; results so far follow", flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    rows = add_ratios([summarize(model, config, runs, errors, args.rounds)
                       for (model, config), (runs, errors) in rows_of.items()])
    print_tables(rows, args)
    machine.update(load_end=os.getloadavg(), seconds=time.monotonic() - started)
    settings = {key: getattr(args, key) for key in ("models", "configs", "rounds", "steps", "warmup", "threads",
                                                    "pin", "timeout", "package_root", "quick")}
    _results.save(args.label, {"rows": rows, "machine": machine, "settings": settings, "spec": SPEC,
                               "interrupted": interrupted, "argv": argv})
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
