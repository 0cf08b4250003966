"""The paper's table, emulated: six model families on 2, 4 and 8 hosts of an ``autodist cluster`` (issue 40).

    sudo python benchmarks/paper_table.py --resume               # every family, 2 4 8 hosts, every plan, 2 rounds:
                                                                 # the runs paper_table_full.json does not have yet
    sudo python benchmarks/paper_table.py --smoke                # 2 hosts, ncf and vgg16, 3 configs: minutes
    sudo python benchmarks/paper_table.py --hosts 4 --families bert --rounds 1 --label bert_4h
    sudo python benchmarks/paper_table.py --hosts 2 --families resnet50 --rate 10gbit --calibrate --label resnet50_2h

Root only. Families (``paper_models``): resnet101, densenet121, inception3,
vgg16, bert (BERT-large's layers), ncf, scaled down with their variables'
structure kept; ``resnet50`` (the issue's ResNet50 at full width, outside the
paper's table) when named. ``--rate`` sets every link to one rate instead of
the paper's ratio (below). With ``--calibrate`` the row's bound takes the
slowest link the probe measured where it is below the shaped rate, and the
probe's duplex (``rpc_duplex``): on namespaced hosts of one machine, as on
loopback nodes, the cores carry the bytes, not the shaped link, and a core
that sends does not receive at the same time. For each number of hosts the
benchmark makes one cluster (network namespaces, real SSH, node k pinned to
core k mod the cores, one thread per process; ``--replicas 2``: two CPU replicas per host, and the
anchors two worker processes per host), and for each family:

1. ``compute``: one replica's step alone on one core (``cluster_step_time_run``);
2. the link rate of the paper's compute-to-wire ratio (below), set on every
   link (``tc tbf``, both ways), and a spec at that rate (``network_bandwidth``,
   which AutoStrategy plans with when no probe ran; ``--calibrate`` probes it);
3. rounds of every configuration, interleaved (even rounds in reverse order,
   ``round_order``): the anchors (the hand-written
   TF1 parameter server ``hand_ps``, MultiWorkerMirroredStrategy with 25 MiB
   packs ``mwms_25mib``) and every builder and AutoStrategy.

The link rate. What decides the best plan is the ratio of a step's compute to
its time on the wire. On the paper's cluster B (AutoSync; 4 NVIDIA T4 per
node, 50 Gbit/s) a GPU's step computes ``6 x macs x batch`` float operations
(forward and backward) at ``T4_FLOPS`` and its node's link carries one copy of
the gradient (the dense parameters and the sparse rows a step touches, 4 bytes
each) at 50 Gbit/s::

    ratio = (6 x macs x batch / T4_FLOPS) / (4 x (dense + sparse floats) x 8 / 50e9)

    resnet101  6 x 7.8e9 x 64 / 6e12 = 499 ms,   4 x 44.5e6 x 8 / 50e9 = 28.5 ms   ratio 17.5
    densenet121                        186 ms,                           5.1 ms   ratio 36
    inception3                         365 ms,                          15.2 ms   ratio 24
    vgg16                              992 ms,                          88.6 ms   ratio 11.2
    bert       6 x 335e6 x 128 x 8 / 6e12 = 343 ms, 4 x (304e6 + 1024 x 1024) x 8 / 50e9 = 195 ms   ratio 1.76
    ncf        6 x 0.2e6 x 8192 / 6e12 = 1.6 ms,  4 x (0.2e6 + 32768 x 96) x 8 / 50e9 = 2.1 ms   ratio 0.77
    resnet50   6 x 4.1e9 x 64 / 6e12 = 262 ms,    4 x 25.6e6 x 8 / 50e9 = 16.4 ms   ratio 16.0

On the emulated hosts a replica's step is the measured ``compute`` times the
replicas that share its core (hosts x replicas / cores: the bound's compute),
and its wire bytes come from the scaled model (``family_counts``); the rate
that keeps the ratio is ``wire bytes x 8 x ratio / that compute``, at most
``MAX_RATE`` (a faster link than the machine's cores can fill limits nothing).

Columns per cell (a family at a number of hosts, a configuration): median
step, examples/s per host, efficiency (the bound's compute over the step: 1.0
is a step that is all compute), bytes on the busiest link per step (the larger
of a node's bytes in and out), the row's lower bound (compute + those bytes at
the link's rate; with a probed duplex d below 1, a node's larger direction
plus (1 - d) x its smaller) and the step over it, plan + transform seconds and the
seconds to the first step (autodist), the peak memory of the fullest host,
the share of the job's cores its processes kept busy over the timed steps
(``cpu busy``: their CPU seconds over the cores times the wall time they were
counted over, from worker 0's ``ready`` to its ``done``; near 1.0 the
machine's cores, not the links, set the step), the ratio to the best anchor,
the spread of its rounds (the slowest round's median over the fastest's) and
AutoStrategy's pick (``(prior)`` where it planned without a probe's
figures). A goal that compares two rows says whether their rounds are apart
(every round of one faster than every round of the other) or overlap: two
rounds of plans that overlap do not tell them apart on this machine. The JSON goes to
``benchmarks/results/<label>.json`` after every run (a stopped run keeps what
it measured), the tables and a plot per family to ``--out`` (``paper_table_report``).
The clusters are removed at the end, also after a failure, Ctrl-C or a SIGTERM
(exit code 130 or 143; further signals are ignored while a cluster is removed).

The whole table is about 400 runs, more than a working day on this machine's
two cores. ``--resume`` continues the record of ``--label``: a cell (family,
hosts, replicas) keeps its compute and link rate, a configuration that already
ran or failed in a round is not run again in it (``--retry-failed`` runs the
failed ones again), a number of hosts with nothing left makes no cluster. The
same command, repeated, finishes the table; more families, hosts,
configurations or rounds extend it. The settings a run is measured under
(``RESUMED_SETTINGS`` and the number of cores) must be the record's, or it
refuses; each invocation is a ``session`` of the record (its command, commit,
load, whether it was interrupted). Without ``--resume`` an existing record is
replaced only with ``--overwrite`` (a ``--smoke`` run remakes its own
``paper_table_smoke``). A cell whose compute run fails is listed under
``failed`` (its latest failure) and the table goes on; not measured, it is
tried again at the next ``--resume``. With ``--calibrate`` a
resumed cell is probed again on its new cluster (AutoStrategy plans with that
probe) and its bound takes the latest probe.
"""
import argparse
import contextlib
import math
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
from cluster_step_time import BenchCluster, round_order  # noqa: E402
from cluster_step_time_run import COMPUTE, run_on_cluster  # noqa: E402
from paper_models import FAMILIES, PAPER, family_counts  # noqa: E402
from paper_table_report import cell_key, job_cpus, load_record  # noqa: E402
from step_time_run import BUCKETS, BUILDERS, RunFailed  # noqa: E402

ANCHORS = ("hand_ps", "mwms_25mib")
TABLE_FAMILIES = tuple(name for name in FAMILIES if name != "resnet50")   # the paper's table
CONFIGS = ANCHORS + BUILDERS
T4_FLOPS = 6e12          # a T4's sustained float32 training rate (8.1 TFLOP/s peak)
PAPER_LINK = 50e9        # bit/s per node
MAX_RATE = 10e9          # bit/s
MIN_RATE = 10e6
#: A run's timed steps cover at least ``--min-timed-s`` of the cell's compute, at most MAX_STEPS steps: 6 steps
#: of ncf's 1 ms compute are 6 ms of measurement, where one scheduler hiccup on this shared machine moved a
#: run's median 1.7x.
MAX_STEPS = 200
#: Timed steps of the single-replica compute run at least (its median sets the cell's link rate: 6 steps of
#: ncf read 0.77 and 0.54 ms on two runs, links at 250 and 355 Mbit/s).
COMPUTE_STEPS = 30
#: What a run is measured under: ``--resume`` continues a record only under the same.
RESUMED_SETTINGS = ("replicas", "steps", "min_timed_s", "warmup", "rate", "calibrate", "threads", "pin")
SMOKE_LABEL = "paper_table_smoke"
SMOKE = {"hosts": [2], "families": ["ncf", "vgg16"], "configs": ["mwms_25mib", "PSLoadBalancing", "AutoStrategy"],
         "rounds": 1, "steps": 3, "warmup": 2, "min_timed_s": 0.0}


def paper_ratio(paper):
    """A GPU step's compute over its gradient's time on the paper's link."""
    compute = 6.0 * paper.macs * paper.batch / T4_FLOPS
    wire = 4.0 * (paper.dense_params + paper.sparse_rows * paper.row_params) * 8 / PAPER_LINK
    return compute / wire


def wire_bytes(model):
    """Bytes of one replica's gradient on the wire: the dense parameters and the sparse rows it touches."""
    _, _, dense, sparse = family_counts(model)
    return 4.0 * (dense + sparse)


def emulated_rate(name, model, compute_s):
    """The link rate (bit/s) that gives a step of ``compute_s`` the paper's compute-to-wire ratio."""
    rate = wire_bytes(model) * 8 * paper_ratio(PAPER[name]) / compute_s
    return min(MAX_RATE, max(MIN_RATE, rate))


def sharing(hosts, replicas, cores):
    """Replicas per core when every host's replicas run on its one core and hosts share the cores."""
    return max(1.0, hosts * replicas / len(cores))


def _with_steps(args, steps):
    return argparse.Namespace(**dict(vars(args), steps=steps))


def timed_steps(steps, min_timed_s, compute_s):
    """Timed steps per run: ``steps``, more where they would cover less than ``min_timed_s`` of compute (at most
    ``MAX_STEPS``)."""
    return max(steps, min(MAX_STEPS, math.ceil(min_timed_s / max(compute_s, 1e-6))))


def pending(cell, configs, rounds):
    """``[(round, config)]`` a cell has still to run, in the order they run: a configuration has its round ``r``
    once it ran or failed ``r`` times (a failure is reported, not retried unless ``--retry-failed``). Odd rounds
    run ``configs`` in order, even rounds in reverse (``round_order``)."""
    def tried(config):
        return len(cell.get("runs", {}).get(config, ())) + len(cell.get("errors", {}).get(config, ()))
    return [(r, config) for r in range(1, rounds + 1) for config in round_order(configs, r) if tried(config) < r]


def measured(cell):
    """Whether a cell has its compute, link rate and timed steps (all or none: ``measure_cell`` sets them at once)."""
    return "steps" in cell


class CellFailed(Exception):
    """A cell's compute run failed: its configurations cannot run (the message names the family and hosts)."""


class Progress:
    """Runs done out of the command's total, and the time left at the mean of the runs so far."""

    def __init__(self, total):
        self.total, self.done, self.seconds = total, 0, 0.0

    def prefix(self):
        return "({}/{})".format(self.done + 1, self.total)

    def ran(self, seconds):
        self.done += 1
        self.seconds += seconds
        left = self.total - self.done
        if left <= 0:
            return "no run left"
        return "{} left, about {:.0f} min".format(_runs(left), left * self.seconds / self.done / 60)


def _runs(count):
    return "{} run{}".format(count, "" if count == 1 else "s")


def measure_cell(cluster, cell, args):
    """A new cell's compute, link rate and timed steps, set together (a resumed cell keeps those it recorded)."""
    name = cell["family"]
    model = FAMILIES[name]
    try:
        compute = run_on_cluster(cluster, name, COMPUTE, _with_steps(args, max(args.steps, COMPUTE_STEPS)))
    except (RunFailed, OSError, subprocess.SubprocessError, ValueError) as e:
        raise CellFailed("{} on {} hosts: its compute run failed: {}".format(name, cluster.nodes, e)) from None
    compute_ms = statistics.median(compute["ms"])
    shared_ms = compute_ms * sharing(cluster.nodes, cluster.replicas, args.cores)
    cell.update(compute_ms=compute_ms, shared_compute_ms=shared_ms, paper_ratio=paper_ratio(PAPER[name]),
                wire_bytes=wire_bytes(model), rate=args.rate or emulated_rate(name, model, shared_ms / 1e3),
                fixed_rate=bool(args.rate), batch=model.batch,
                steps=timed_steps(args.steps, args.min_timed_s, shared_ms / 1e3))


def calibrate_cell(cluster, cell):
    """Probe the cell's cluster (``--calibrate``); the bound takes the latest probe."""
    found = cluster.calibration()
    cell["calibration"] = {node: rate * 8 for node, rate in found["link_bandwidth"].items()}
    # the bound's link: the slowest the probe measured where the machine cannot fill the shaped rate, and
    # whether a node moves bytes both ways at once (the cores that carry them also compute)
    cell["link_rate"] = min([cell["rate"]] + list(cell["calibration"].values()))
    cell["duplex"] = found["rpc_duplex"]
    print("probed links: slowest {:.0f} Mbit/s, duplex {:.2f}".format(cell["link_rate"] / 1e6, cell["duplex"]),
          flush=True)


def run_cell(cluster, cell, args, save, progress):
    """One family (``cell["family"]``) on one cluster: compute and rate (unless the cell has them), then the
    configurations of ``pending``, round by round, filling ``cell`` as the runs come (``save()`` after each).
    Raises ``CellFailed`` when the compute run fails."""
    name = cell["family"]
    todo = pending(cell, args.configs, args.rounds)
    if not todo:
        return
    cell.update(hosts=cluster.nodes, replicas=cluster.replicas)
    cell.setdefault("runs", {})
    cell.setdefault("errors", {})
    cell.setdefault("cpus", job_cpus(cluster.nodes, len(args.cores), args.pin))   # resume keeps cores and pinning
    resumed = measured(cell)
    if not resumed:
        measure_cell(cluster, cell, args)
    cluster.reshape(cell["rate"])
    cluster.use_spec("{}-{}".format(name, cluster.nodes))
    print("{} on {} hosts{}: compute {:.1f} ms ({:.1f} ms shared), links at {:.0f} Mbit/s, {} timed steps a "
          "run".format(name, cluster.nodes, ", resumed" if resumed else "", cell["compute_ms"],
                       cell["shared_compute_ms"], cell["rate"] / 1e6, cell["steps"]), flush=True)
    if args.calibrate:
        calibrate_cell(cluster, cell)
    args = _with_steps(args, cell["steps"])
    for round_index, config in todo:
        print("{} [{} hosts, {}, round {}/{}] {} ...".format(progress.prefix(), cluster.nodes, name, round_index,
                                                            args.rounds, config), end=" ", flush=True)
        started = time.monotonic()
        try:
            result = run_on_cluster(cluster, name, config, args)
        except (RunFailed, OSError, subprocess.SubprocessError, ValueError) as e:
            cell["errors"].setdefault(config, []).append("round {}: {}".format(round_index, e))
            print("FAILED: {} ({})".format(str(e)[:300], progress.ran(time.monotonic() - started)), flush=True)
            save()
            continue
        result["wall_s"] = time.monotonic() - started
        cell["runs"].setdefault(config, []).append(result)
        print("median {:.1f} ms ({:.0f} s; {})".format(statistics.median(result["ms"]), result["wall_s"],
                                                      progress.ran(result["wall_s"])), flush=True)
        save()


def _rate(text):
    from autodist.errors import ArgumentError
    from autodist.runner.cluster.network import format_rate, parse_rate
    try:
        bits = parse_rate(text)
    except ArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if bits > MAX_RATE:
        raise argparse.ArgumentTypeError("rate {!r}: at most {}".format(text, format_rate(MAX_RATE)))
    return bits


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--families", nargs="+", default=list(TABLE_FAMILIES), choices=list(FAMILIES),
                        help="default: the paper's ({}); resnet50 only when named".format(" ".join(TABLE_FAMILIES)))
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS) + list(BUCKETS),
                        help="default: the anchors and every builder; AllReduce_<n>mib (AllReduce's buckets of "
                             "n MiB, closed by bytes alone) only when named")
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 2), help="CPU replicas per host")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run, at least")
    parser.add_argument("--min-timed-s", type=float, default=0.5,
                        help="more timed steps where --steps would cover less than this much compute (s; at most "
                             "{})".format(MAX_STEPS))
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--rate", type=_rate, default=None,
                        help="every link at this rate (tc notation, at most {:g}gbit) instead of the paper's ratio; "
                             "with --calibrate the bound takes the probed link where it is slower".format(
                                 MAX_RATE / 1e9))
    parser.add_argument("--calibrate", action="store_true", help="probe every cell's cluster (autodist calibrate)")
    parser.add_argument("--smoke", action="store_true", help="a few minutes: " + ", ".join(
        "{} {}".format(k, v) for k, v in SMOKE.items()))
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per process")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True, help="node k on core k")
    parser.add_argument("--timeout", type=float, default=900.0, help="s one run may take")
    parser.add_argument("--label", default=None,
                        help="results name (default paper_table_full, paper_table_smoke with --smoke)")
    parser.add_argument("--resume", action="store_true",
                        help="continue benchmarks/results/<label>.json: only the runs it lacks")
    parser.add_argument("--retry-failed", action="store_true",
                        help="with --resume: run again the configurations that failed (their errors kept as "
                             "'retried')")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing <label>.json")
    parser.add_argument("--out", default=None, help="directory of the tables and plots (default benchmarks/results)")
    parser.add_argument("--results-dir", default=None)
    return parser


def options(argv=None):
    """The command line's settings, ``--smoke``'s in place of those it sets."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.retry_failed and not args.resume:
        parser.error("--retry-failed runs a record's failures again: it needs --resume")
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    args.label = args.label or (SMOKE_LABEL if args.smoke else "paper_table_full")
    return args


class ResumeRefused(Exception):
    """A record this command must not continue or replace (the message names the file, why and what to do)."""


def settings(args):
    return {key: getattr(args, key) for key in RESUMED_SETTINGS}


def _commit():
    """The checkout's commit, or ``None`` outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def resumed_record(path, args):
    """The record ``--resume`` continues (``None`` where there is none yet), checked against ``args``."""
    if not os.path.exists(path):
        return None
    try:
        record = load_record(path)
    except (OSError, ValueError) as e:
        raise ResumeRefused("{}: not a paper_table.py record ({}: {}); pass another --label".format(
            path, type(e).__name__, e)) from None
    if "settings" not in record:
        raise ResumeRefused("{} does not say what its runs were measured under (it predates --resume); pass another "
                            "--label".format(path))
    wanted = dict(settings(args), cores=len(args.cores))
    recorded = dict(record["settings"], cores=record.get("cores"))
    differing = ["{} {!r} (recorded {!r})".format(key, wanted[key], recorded.get(key))
                 for key in wanted if recorded.get(key) != wanted[key]]
    if differing:
        raise ResumeRefused("{} was measured under other settings: {}; run with the recorded ones or pass another "
                            "--label".format(path, ", ".join(differing)))
    return record


def open_record(path, args):
    """The record this command fills: the one ``--resume`` continues, else a new one (an existing file is
    replaced only with ``--overwrite`` or ``--smoke``), with this command's session appended."""
    record = resumed_record(path, args) if args.resume else None
    disposable = args.smoke and args.label == SMOKE_LABEL   # a smoke run's own record, remade each time
    if record is None and os.path.exists(path) and not (args.overwrite or disposable):
        raise ResumeRefused("{} exists: --resume continues it, --overwrite replaces it, --label names another "
                            "record".format(path))
    if args.resume:
        print("no record at {} yet: a new table".format(path) if record is None else "resuming {} ({} cells "
              "measured)".format(path, sum(measured(c) for c in record["cells"])), flush=True)
    if record is None:
        record = {"cells": [], "load_start": os.getloadavg(), "replicas": args.replicas, "cores": len(args.cores),
                  "settings": settings(args), "sessions": []}
    if args.retry_failed:
        ran = {(name, hosts, args.replicas) for name in args.families for hosts in args.hosts}
        for cell in [c for c in record["cells"] if cell_key(c) in ran]:
            for config in [c for c in cell.get("errors", {}) if c in args.configs]:
                cell.setdefault("retried", {}).setdefault(config, []).extend(cell["errors"].pop(config))
    sessions = record.setdefault("sessions", [])
    commit = _commit()
    if sessions and sessions[-1].get("commit") != commit:
        print("note: the record's last runs were made at commit {}, these at {}".format(sessions[-1].get("commit"),
                                                                                         commit), flush=True)
    sessions.append({"argv": args.argv, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": commit,
                     "load_start": os.getloadavg(), "interrupted": False})
    record["interrupted"] = False   # the latest session's
    return record


def cell_of(record, family, hosts, replicas):
    """The record's cell of (family, hosts, replicas), added to it if it has none."""
    for cell in record["cells"]:
        if cell_key(cell) == (family, hosts, replicas):
            return cell
    record["cells"].append({"family": family, "hosts": hosts, "replicas": replicas})
    return record["cells"][-1]


def run_table(record, args, save):
    """Every pending run of the command's cells, host count by host count (one cluster each, none where nothing is
    left); a cell whose compute run fails is recorded in ``record["failed"]`` and the table goes on."""
    cells = {(hosts, name): cell_of(record, name, hosts, args.replicas) for hosts in args.hosts
             for name in args.families}
    progress = Progress(sum(len(pending(cell, args.configs, args.rounds)) for cell in cells.values()))
    print("{} to go".format(_runs(progress.total)), flush=True)
    directory = os.path.join(_results.RESULTS_DIR, "specs")
    os.makedirs(directory, exist_ok=True)
    for hosts in args.hosts:
        if not any(pending(cells[hosts, name], args.configs, args.rounds) for name in args.families):
            continue
        with BenchCluster("1gbit", args, directory, nodes=hosts, replicas=args.replicas) as cluster:
            for name in args.families:
                try:
                    run_cell(cluster, cells[hosts, name], args, save, progress)
                except CellFailed as e:
                    print("FAILED: {}".format(e), flush=True)
                    progress.total -= len(pending(cells[hosts, name], args.configs, args.rounds))
                    failed = [f for f in record.get("failed", []) if (f["family"], f["hosts"]) != (name, hosts)]
                    record["failed"] = failed + [{"family": name, "hosts": hosts, "error": str(e),
                                                  "time": time.strftime("%Y-%m-%dT%H:%M:%S")}]
                save()


@contextlib.contextmanager
def _stopped_as_by_ctrl_c(stopped):
    """SIGTERM (``kill``, ``timeout``, a scheduler's end of the job) and SIGINT stop the table as Ctrl-C does: the
    run under way is stopped, the cluster removed, what was measured kept. SIGINT too: a command started in the
    background of a non-interactive shell (``nohup ... &``) inherits it ignored. The first signal is appended
    to ``stopped``; later ones are ignored, so that the cluster's removal runs to its end."""
    def stop(signum, frame):
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        stopped.append(signum)
        print("\n{}: stopping; the cluster is being removed (further signals are ignored)".format(
            signal.Signals(signum).name), flush=True)
        raise KeyboardInterrupt
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv=None):
    args = options(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if os.geteuid() != 0:
        print("paper_table: autodist cluster needs root", file=sys.stderr)
        return 2
    if args.results_dir:
        _results.RESULTS_DIR = args.results_dir
    args.cores, args.package_root = sorted(os.sched_getaffinity(0)), REPO
    try:
        record = open_record(os.path.join(_results.RESULTS_DIR, args.label + ".json"), args)
    except ResumeRefused as e:
        print("paper_table: {}".format(e), file=sys.stderr)
        return 2
    from autodist.runner.console import quiet_tensorflow_start
    quiet_tensorflow_start()   # this process imports TensorFlow (the families' counts): no start-up chatter
    session = record["sessions"][-1]

    def save():
        record["load_end"] = session["load_end"] = os.getloadavg()
        _results.save(args.label, dict(record, cells=[c for c in record["cells"] if measured(c)]))

    stopped = []
    try:
        with _stopped_as_by_ctrl_c(stopped):
            run_table(record, args, save)
    except KeyboardInterrupt:
        record["interrupted"] = session["interrupted"] = True
        stopped = stopped or [signal.SIGINT]
        print("\ninterrupted; the cluster was removed; results so far follow (--resume continues them)")
    record["cells"] = [c for c in record["cells"] if measured(c)]
    save()
    from paper_table_report import report
    report(record, args.out or _results.RESULTS_DIR, args.label)
    return 128 + stopped[0] if stopped else 0   # a shell's code for the signal: 130 Ctrl-C, 143 SIGTERM


if __name__ == "__main__":
    sys.exit(main())
