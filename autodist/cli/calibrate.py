"""``autodist calibrate``: measure the cluster's transport for the cost model, and cache it.

    autodist calibrate -r SPEC [--repeats N] [--format table|json] [--show]

Starts a TensorFlow server on every node of the spec (as a job does), measures
latency and bandwidth of TensorFlow's own transport between them, the fixed
cost of a step and this machine's compute rates (``runtime.calibrate.probe``),
writes them to ``~/.autodist/calibration/<spec key>.json`` and prints them
beside the prior the spec alone gives (the servers' output goes to stderr, and so does the progress: a live
bar on a terminal, elsewhere a line before each measurement, which on slow links take a minute each).
``--show`` prints the cached figures (or the prior) without probing. ``autodist plan`` and ``AutoStrategy`` read
the cache; a job's chief planning with AutoStrategy for a cluster without one
runs this command first (``runtime.calibrate.first_probe``).
"""
import argparse
import json
import sys

__all__ = ["register", "calibration_rows", "link_rows", "machine_rows", "ProbeProgress"]

_ROWS = (("rpc_latency_s", "rpc latency (a PS variable's push/pull, per message)", 1e6, "us"),
         ("rpc_bandwidth", "rpc bandwidth", 1e-6, "MB/s"),
         ("rpc_duplex", "rpc both ways at once (1) or in turn (0)", 1.0, ""),
         ("collective_latency_s", "collective latency (per ring message)", 1e6, "us"),
         ("collective_bandwidth", "collective bandwidth", 1e-6, "MB/s"),
         ("local_bandwidth", "in-process copy bandwidth", 1e-6, "MB/s"),
         ("update_bytes_per_s", "parameter-server update rate", 1e-6, "MB/s"),
         ("sparse_update_bytes_per_s", "parameter-server sparse update rate", 1e-6, "MB/s"),
         ("sparse_apply_bytes_per_s", "sparse all-reduce rate on the others' rows", 1e-6, "MB/s"),
         ("sparse_gather_s", "sparse all-reduce's chain of gathers per step", 1e3, "ms"),
         ("fixed_step_s", "fixed cost per step", 1e3, "ms"),
         ("ps_step_s", "synchronous PS protocol per step", 1e3, "ms"),
         ("round_trip_s", "collective round trip per step", 1e3, "ms"),
         ("overlap", "overlap of communication with backprop", 1.0, ""),
         ("flops", "float operations per second (one replica)", 1e-9, "GFLOP/s"),
         ("op_s", "an op's cost beyond its arithmetic", 1e6, "us"))


def register(subparsers):
    parser = subparsers.add_parser(
        "calibrate", help="measure the cluster's bandwidth, latency and fixed step cost for the cost model",
        description="Probe TensorFlow's transport between the spec's nodes and cache the figures the cost "
                    "model (autodist plan, AutoStrategy) predicts step times with.")
    parser.add_argument("-r", "--resource-spec", metavar="SPEC", required=True, help="resource spec (YAML)")
    from autodist.cli.common import checked
    from autodist.runtime.limits import whole
    parser.add_argument("--repeats", type=checked(whole, int), default=None, metavar="N",
                        help="timed runs per measurement (default 7, or 3 where the spec's network_bandwidth makes "
                             "a 16 MiB all-reduce take over half a second)")
    parser.add_argument("--show", action="store_true", help="print the cached figures (or the prior); no probe")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    # AutoStrategy's first probe (runtime.calibrate.first_probe): stop when the chief that started it ends
    parser.add_argument("--stop-with-parent", type=int, metavar="PID", help=argparse.SUPPRESS)
    parser.set_defaults(handler=_calibrate)


def calibration_rows(found, prior):
    """``(what, found, prior, unit)`` text rows of two calibrations."""
    def text(value, scale):
        return "{:.4g}".format(value * scale)
    return [(label, text(getattr(found, key), scale), text(getattr(prior, key), scale), unit)
            for key, label, scale, unit in _ROWS]


def _calibrate(args):
    from autodist.spec.resource_spec import ResourceSpec
    from autodist.strategies.cost import cluster_calibration, prior_calibration, save_calibration
    from autodist.strategies.cost.calibration import calibration_path
    if args.stop_with_parent is not None:
        from autodist.runtime.calibrate.first_probe import stop_with_parent
        if not stop_with_parent(args.stop_with_parent):
            print("autodist calibrate: the process that started this probe (pid {}) has ended; not "
                  "probing".format(args.stop_with_parent), file=sys.stderr)
            return 1
    spec = ResourceSpec(args.resource_spec)
    prior = prior_calibration(spec)
    if args.show:
        found, path = cluster_calibration(spec), calibration_path(spec)
    else:
        from autodist.runner.console import NodeConsole, quiet_tensorflow_start
        quiet_tensorflow_start()   # this process's TensorFlow chatter stays off the console too
        from autodist.runtime.launch.server import READY
        from autodist.runtime.calibrate.probe import probe
        with ProbeProgress(sys.stderr) as progress:
            # the nodes' own lines, without TensorFlow's chatter, on stderr (above a live bar): stdout stays ours
            found = probe(spec, repeats=args.repeats, sink=NodeConsole(stream=sys.stderr, hidden=(READY,)),
                          progress=progress)
        path = save_calibration(spec, found)
    if args.format == "json":
        print(json.dumps({"calibration": found.to_dict(), "prior": prior.to_dict(), "path": path}, indent=2))
        return 0
    print("{} ({}): {}".format(spec.path, found.source, path))
    rows = [("", "found", "prior", "")] + calibration_rows(found, prior)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.rjust(w) if i in (1, 2) else cell.ljust(w) for i, (cell, w) in
                        enumerate(zip(row, widths))).rstrip())
    for line in link_rows(found, prior) + machine_rows(found):
        print(line)
    return 0


class ProbeProgress:
    """``probe``'s ``progress(done, total, key)`` on ``stream``: a live bar on a terminal (rich), elsewhere a
    line a measurement (``[autodist] calibrate 3/17: 16 MiB from the last node``). On slow links a
    measurement takes a minute; the lines say which one the probe is at."""

    def __init__(self, stream):
        self.stream, self._bar, self._task = stream, None, None

    def __enter__(self):
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._bar = Progress(TextColumn("calibrate"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("", total=None)
        return self

    def __call__(self, done, total, key):
        from autodist.runtime.calibrate.probe import STAGES
        what = STAGES.get(key, key)
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, description=what)
        else:
            from autodist.runtime.notices import notice
            notice(self.stream, "calibrate {}/{}: {}".format(done + 1, total, what))

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
        return False


def link_rows(found, prior):
    """A line per node: its link rate found (``runtime.calibrate.links``) and the spec's."""
    links, spec = found.link_bandwidth or {}, prior.link_bandwidth or {}
    return ["link {}  {:.4g} Mbit/s  (spec {:.4g} Mbit/s)".format(node, links[node] * 8e-6, spec.get(node, 0) * 8e-6)
            for node in sorted(links)]


def machine_rows(found):
    """A line per machine the probe found several nodes on (``Calibration.machines``): they share its cores."""
    from autodist.strategies.cost.calibration import shared_machines
    return ["one machine: {} (they share its cores: their bytes are priced together)".format(", ".join(nodes))
            for nodes in shared_machines(found, sorted(found.machines or {}))]
