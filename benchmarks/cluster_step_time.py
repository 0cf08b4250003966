"""Step time on separate hosts (``autodist cluster``): the loopback comparison over shaped links (issue 30).

    python benchmarks/cluster_step_time.py                          # mlp at 200 Mbit/s and 1 Gbit/s, 2 rounds
    python benchmarks/cluster_step_time.py --rates 1gbit --configs hand_ps mwms_25mib AllReduce --rounds 1

Root only. For each rate it makes a two-node cluster (network namespaces on a
bridge, every link shaped both ways, an sshd per node; node k pinned to core
k, ``--threads`` per process), probes it (``autodist calibrate``: the link
rates it reads against the shaping, and the cache AutoStrategy plans with),
then runs ``step_time.py``'s configurations in rounds, interleaved (even
rounds backwards, ``round_order``): the TF1 hand-written parameter server
and MultiWorkerMirroredStrategy with 25 MiB packs against every builder,
AutoStrategy and the compressed all-reduces, all in the same namespaces
(``cluster_step_time_run``), plus ``compute``: one replica's step alone on
one core. Columns per row: median / p90 ms of worker
0's timed steps, CPU ms per step (every process in the namespaces), bytes on
the busiest link per step (the larger of a node's bytes in and out, read off
its interface), ``bound``: compute + those bytes at the link's rate, the
lower bound of that row's step; ``x bound``, and ``ratio`` to the best of
hand_ps and mwms_25mib. The goals of issue 30 are checked at the end; the
JSON goes to ``benchmarks/results/<label>.json``. The cluster is removed at
the end of each rate, also after a failure or Ctrl-C.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from cluster_step_time_run import COMPUTE, run_on_cluster  # noqa: E402
from step_time_models import MODELS  # noqa: E402
from step_time_run import BUCKETS, BUILDERS, COMPRESSED, RunFailed, child_env  # noqa: E402

BASELINES = ("hand_ps", "mwms_25mib")
CONFIGS = BASELINES + BUILDERS + tuple(COMPRESSED)
PLAIN_BUILDERS = tuple(b for b in BUILDERS if b != "AutoStrategy")


class BenchCluster:
    """The cluster of one rate: what ``run_on_cluster`` needs (names, nodes, replicas per node, spec), made and
    removed here. ``reshape`` sets every link to another rate and ``use_spec`` writes the spec of it (with
    ``replicas`` CPUs a node), which runs and the probe then use; the files it wrote go with the cluster."""

    def __init__(self, rate, args, directory, nodes=2, replicas=1):
        from autodist.runner.cluster import ClusterNames, parse_rate
        self.names = ClusterNames("bench{}".format(os.getpid() % 100000))
        self.nodes, self.replicas, self.rate_text, self.rate = nodes, replicas, rate, parse_rate(rate)
        self.spec = os.path.join(directory, "{}-{}.yml".format(self.names.name, rate))
        self._made_spec, self._written = self.spec, []
        self._args = args

    def __enter__(self):
        from autodist.runner.cluster import up
        cores = [(self._args.cores[k % len(self._args.cores)],) for k in range(self.nodes)]
        up(self.names, self.nodes, self.rate, self.spec, cores=cores if self._args.pin else (),
           threads=self._args.threads, say=lambda line: print(line, flush=True))
        return self

    def __exit__(self, *exc):
        from autodist.runner.cluster import down
        down(self.names, say=lambda line: print(line, flush=True))
        for path in self._written:
            if os.path.exists(path):
                os.remove(path)

    def reshape(self, rate):
        """Every node's link at ``rate`` bit/s each way."""
        from autodist.runner.cluster.network import shape
        for index in range(self.nodes):
            shape(self.names, index, int(rate))
        self.rate = int(rate)

    def use_spec(self, label):
        """Write and use a spec of this cluster at its current rate (``network_bandwidth``: AutoStrategy's prior
        and the probe cache's key follow it) with ``replicas`` CPUs per node; returns its path."""
        import yaml
        with open(self._made_spec) as f:
            data = yaml.safe_load(f)
        for node in data["nodes"]:
            node["network_bandwidth"] = self.rate / 1e9
            if self.replicas > 1:
                node["cpus"] = list(range(self.replicas))
        path = os.path.join(os.path.dirname(self._made_spec), "{}-{}.yml".format(self.names.name, label))
        with open(path, "w") as f:
            yaml.safe_dump(data, f, sort_keys=False)
        self._written.append(path)
        self.spec = path
        return path

    def calibrate(self):
        """``{address: link rate in bit/s}`` read by ``autodist calibrate`` (its cache serves AutoStrategy)."""
        return {node: rate * 8 for node, rate in self.calibration()["link_bandwidth"].items()}

    def calibration(self):
        """The calibration ``autodist calibrate`` reads on the cluster (``Calibration``'s fields, as JSON)."""
        done = subprocess.run(["ip", "netns", "exec", self.names.namespace(0), sys.executable, "-m", "autodist",
                               "calibrate", "-r", self.spec, "--repeats", "3", "--format", "json"], cwd=REPO,
                              env=child_env(self._args, "calibrate"), capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RunFailed("autodist calibrate failed: {}".format(done.stderr.strip()[-500:]))
        return json.loads(done.stdout)["calibration"]


def summarize(config, runs, rate):
    """One row of a rate's table from its runs (the lower bound is added by ``add_bounds``)."""
    row = {"config": config, "median_ms": None, "p90_ms": None, "cpu_ms": None, "busiest_bytes": None,
           "bytes_per_wstep": None, "rounds": len(runs), "loss": None}
    if not runs:
        return row
    ms = [t for run in runs for t in run["ms"]]
    steps = len(ms)
    moved = [max(max(b) for b in run["node_bytes"].values()) / len(run["ms"]) for run in runs]
    sent = sum(sum(b[1] for b in run["node_bytes"].values()) for run in runs)
    row.update(median_ms=statistics.median(ms), p90_ms=statistics.quantiles(ms, n=10)[-1] if steps > 1 else ms[0],
               cpu_ms=1e3 * sum(r["cpu_s"] for r in runs) / steps, busiest_bytes=statistics.median(moved),
               bytes_per_wstep=sent / steps / 2)
    losses = [r["loss"] for r in runs if r.get("loss") is not None]
    row["loss"] = statistics.median(losses) if losses else None
    return row


def add_bounds(rows, rate):
    """Each row's lower bound (compute + busiest link bytes at ``rate`` bit/s), and its ratios."""
    by = {r["config"]: r for r in rows}
    compute = by.get(COMPUTE, {}).get("median_ms")
    best = min((by[b]["median_ms"] for b in BASELINES if by.get(b, {}).get("median_ms")), default=None)
    for row in rows:
        if row["median_ms"] is None or row["config"] == COMPUTE:
            continue
        if compute is not None and row["busiest_bytes"] is not None:
            row["bound_ms"] = compute + 1e3 * row["busiest_bytes"] * 8 / rate
            row["x_bound"] = row["median_ms"] / row["bound_ms"]
        row["ratio"] = row["median_ms"] / best if best else None
    return rows


def _best_builder_goals(by, configs, what):
    """The 1 Gbit/s goals of the best of ``configs``: against the baselines (0.6) and its lower bound (1.15)."""
    builders = [by[b] for b in configs if b in by]
    baseline = min((by[b]["median_ms"] for b in BASELINES if b in by), default=None)
    if not builders or not baseline:
        return []
    best = min(builders, key=lambda r: r["median_ms"])
    found = [("1gbit: best {} ({}) / best of hand_ps, mwms_25mib <= 0.6".format(what, best["config"]),
              best["median_ms"] / baseline, best["median_ms"] / baseline <= 0.6)]
    if best.get("x_bound"):
        found.append(("1gbit: best {} ({}) / its lower bound <= 1.15".format(what, best["config"]), best["x_bound"],
                      best["x_bound"] <= 1.15))
    return found


def goals(tables, calibrations):
    """``[(goal, value, met)]`` of issue 30 over the tables ``{rate text: rows}``: the best builder counted
    among the exact ones (as one device trains) and among all, the opt-in compressed all-reduces too."""
    found = []
    for rate, rows in tables.items():
        by = {r["config"]: r for r in rows if r["median_ms"] is not None}
        builders = [by[b] for b in PLAIN_BUILDERS if b in by]
        best = min(builders, key=lambda r: r["median_ms"]) if builders else None
        if rate == "1gbit":
            found += _best_builder_goals(by, PLAIN_BUILDERS, "exact builder")
            found += _best_builder_goals(by, PLAIN_BUILDERS + tuple(COMPRESSED), "builder, compressed too")
        for variant, want in (("AllReduce_fp16", 1.7), ("AllReduce_powersgd", 5.0)):
            if rate == "1gbit" and variant in by and "AllReduce" in by:
                speedup = by["AllReduce"]["median_ms"] / by[variant]["median_ms"]
                found.append(("1gbit: AllReduce / {} >= {}".format(variant, want), speedup, speedup >= want))
        if best and "AutoStrategy" in by:
            ratio = by["AutoStrategy"]["median_ms"] / best["median_ms"]
            found.append(("{}: AutoStrategy / best builder ({}) <= 1.05".format(rate, best["config"]), ratio,
                          ratio <= 1.05))
    for rate, (shaped, links) in calibrations.items():
        worst = max(abs(value / shaped - 1) for value in links.values()) if links else None
        if worst is not None:
            found.append(("{}: calibrate reads every link within 15 %".format(rate), worst, worst <= 0.15))
    return found


def print_table(rate, rows, model):
    print("\n{} at {} per link each way ({} per worker step)".format(model, rate, MODELS[model].batch))
    print("{:<22} {:>10} {:>10} {:>11} {:>12} {:>10} {:>8} {:>6}".format(
        "config", "median ms", "p90 ms", "CPU ms/step", "busiest link", "bound ms", "x bound", "ratio"))
    for row in rows:
        def cell(key, fmt):
            return "-" if row.get(key) is None else fmt.format(row[key])
        print("{:<22} {:>10} {:>10} {:>11} {:>12} {:>10} {:>8} {:>6}".format(
            row["config"], cell("median_ms", "{:.1f}"), cell("p90_ms", "{:.1f}"), cell("cpu_ms", "{:.0f}"),
            cell("busiest_bytes", "{:.3g} B"), cell("bound_ms", "{:.1f}"), cell("x_bound", "{:.2f}"),
            cell("ratio", "{:.2f}")))
        for error in row.get("errors", []):
            print("    ! " + error[:400])


def round_order(configs, r):
    """The order of round ``r``: ``configs`` forward in odd rounds, backward in even ones. A run's place in its
    round may move its step: bert on 4 hosts, the second of two configurations a round stepped 489 ms (median of
    six runs) and the first 451, whichever configuration it was, rounds overlapping (docs/performance.md, phase
    12). With one order the last configuration always paid it (``paper_table``'s AutoStrategy, this script's
    compressed all-reduces); an even number of rounds gives every configuration the same mean place (an odd
    number favours the first). Both benchmarks order their rounds with it."""
    return list(configs) if r % 2 else list(reversed(configs))


def run_rate(rate, args, directory):
    """Calibrate and run every round at one rate: ``(rows, link rates read)``."""
    runs = {config: ([], []) for config in (COMPUTE,) + tuple(args.configs)}
    with BenchCluster(rate, args, directory) as cluster:
        links = cluster.calibrate()
        print("calibrate read: " + ", ".join("{} {:.0f} Mbit/s".format(n, r / 1e6) for n, r in sorted(links.items())))
        for round_index in range(1, args.rounds + 1):
            for config in round_order(runs, round_index):
                print("[{} round {}/{}] {} {} ...".format(rate, round_index, args.rounds, args.model, config),
                      end=" ", flush=True)
                started = time.monotonic()
                try:
                    result = run_on_cluster(cluster, args.model, config, args)
                except (RunFailed, OSError, subprocess.SubprocessError, ValueError) as e:
                    runs[config][1].append("round {}: {}".format(round_index, e))
                    print("FAILED: {}".format(str(e)[:300]), flush=True)
                    continue
                runs[config][0].append(result)
                print("median {:.1f} ms ({:.0f} s)".format(statistics.median(result["ms"]),
                                                           time.monotonic() - started), flush=True)
        rows = [dict(summarize(c, r, cluster.rate), errors=e) for c, (r, e) in runs.items()]
        return add_bounds(rows, cluster.rate), cluster.rate, links


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", nargs="+", default=["200mbit", "1gbit"], help="link rates, tc notation")
    parser.add_argument("--model", default="mlp", choices=list(MODELS))
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS) + list(BUCKETS),
                        help="default: the anchors, every builder and the compressed AllReduce; AllReduce_<n>mib "
                             "(buckets of n MiB, closed by bytes alone) only when named")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run (default 8)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per process")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True, help="node k on core k")
    parser.add_argument("--timeout", type=float, default=900.0, help="s one run may take")
    parser.add_argument("--label", default="cluster_step_time")
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    if os.geteuid() != 0:
        print("cluster_step_time: autodist cluster needs root", file=sys.stderr)
        return 2
    args.cores, args.package_root = sorted(os.sched_getaffinity(0)), REPO
    load = os.getloadavg()
    print("load average {:.2f} {:.2f} {:.2f}".format(*load), flush=True)
    directory = os.path.join(_results.RESULTS_DIR, "specs")
    os.makedirs(directory, exist_ok=True)
    tables, calibrations, interrupted = {}, {}, False
    try:
        for rate in args.rates:
            rows, bits, links = run_rate(rate, args, directory)
            tables[rate], calibrations[rate] = rows, (bits, links)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted; the cluster was removed; results so far follow")
    for rate, rows in tables.items():
        print_table(rate, rows, args.model)
    checked = goals(tables, calibrations)
    print("\ngoals (issue 30):")
    for goal, value, met in checked:
        print("  {:<70} {:>7.3f}  {}".format(goal, value, "met" if met else "NOT met"))
    _results.save(args.label, {"tables": tables, "calibrations": {r: {"shaped": b, "read": l} for r, (b, l) in
                                                                   calibrations.items()},
                               "goals": checked, "load_start": load, "load_end": os.getloadavg(),
                               "argv": sys.argv[1:] if argv is None else argv, "interrupted": interrupted})
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
