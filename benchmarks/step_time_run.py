"""One run of one configuration: its processes, their environment, the measured window.

    result = run_config("mlp", "PSLoadBalancing", args)
    # {"ms": [...timed steps of worker 0...], "cpu_s": ..., "sent": ..., "cross_node": ..., "loss": ...,
    #  "notes": [...]}

``launches(config)`` says which processes the harness starts (worker 0 last,
as the reporter); ``run_config`` starts them (``python step_time.py --role
...``, see ``step_time_roles``), pins them and what they start while the job
comes up, and between worker 0's ``ready`` and ``done`` takes the CPU and
socket snapshots (``step_time_procs``). A run that produces no timings raises
``RunFailed`` naming the process and its last output lines; whatever happens,
every process of the run is stopped by pid before ``run_config`` returns (a
Ctrl-C during the stop is held until it is complete). A run takes at most
``--timeout`` s until worker 0's ``loss`` (after its ``done``), then ``FINISH`` s for the processes
to exit and the stop's grace period.
"""
import dataclasses
import json
import os
import queue
import re
import shutil
import signal
import socket
import sys
import tempfile
import time

from step_time_models import MODELS
from step_time_procs import ProcessTable, socket_snapshot, traffic
from step_time_roles import MARKER

__all__ = ["BUILDERS", "COMPRESSED", "BUCKETS", "VARIANTS", "KERAS_ADAM",
           "BASELINES", "CONFIGS", "SPEC", "WORKERS", "RunFailed", "Launch", "launches", "child_env",
           "run_config"]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "step_time.py")
BUILDERS = ("PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax", "AutoStrategy")
#: Opt-in compression, next to the uncompressed AllReduce: config -> (builder, its arguments).
COMPRESSED = {"AllReduce_fp16": ("AllReduce", {"compressor": "HorovodCompressor"}),
              "AllReduce_powersgd": ("AllReduce", {"compressor": "PowerSGDCompressor"})}
BASELINES = ("hand_ps", "mwms", "mwms_25mib")
#: AllReduce's fusion, swept: buckets closed by bytes alone (no ``chunk_size`` member limit), as
#: MultiWorkerMirroredStrategy's ``bytes_per_pack`` packs are; ``AllReduce_25mib`` packs as ``mwms_25mib`` does,
#: ``AllReduce_16mib`` is AutoStrategy's AllReduce at its default bucket (``auto.BUCKET_CHOICES``);
#: ``AllReduce_128mib`` one ring for mlp's 96 MiB and cnn's, next to the same bytes in several rings.
#: 2 ** 31 members: ``autodist.strategies.auto.FUSE_ALL`` (not imported: the harness imports no autodist; its runs take
#: theirs from --package-root).
BUCKETS = {"AllReduce_{}mib".format(mib): ("AllReduce", {"chunk_size": 2 ** 31, "bucket_bytes": mib << 20})
           for mib in (1, 4, 8, 16, 25, 128)}
#: Builders with other arguments than their defaults: config -> (builder, its arguments).
VARIANTS = dict(COMPRESSED, PS_proxy=("PS", {"local_proxy_variable": True}),
                PSLoadBalancing_proxy=("PSLoadBalancing", {"local_proxy_variable": True}), **BUCKETS)
#: Builders trained with Keras 3 Adam instead of plain SGD (an optimizer whose update is many ops, as
#: users' are): config -> builder.
KERAS_ADAM = {"PS_adam": "PS", "PSLoadBalancing_adam": "PSLoadBalancing", "AllReduce_adam": "AllReduce"}
#: Builders accumulating gradients over k calls (``AutoDist(accumulation_steps=k)``): config -> (builder, k).
ACCUMULATED = {"{}_k{}".format(b, k): (b, k) for b in ("AllReduce", "PSLoadBalancing") for k in (4, 16)}
CONFIGS = BASELINES + ("single",) + BUILDERS + tuple(VARIANTS) + tuple(KERAS_ADAM) + tuple(ACCUMULATED)
SPEC = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
NODES = ("127.0.0.1", "127.0.0.2")
WORKERS = len(NODES)
PACK_25MIB = 25 << 20
FINISH = 60.0   # s the processes get to exit by themselves after the timed steps
TICK = 0.25     # s between checks while a configuration starts
NOISE = re.compile(r"(^|\] )([IW]\d{4} \d\d:\d\d:|WARNING: All log messages before absl)")   # TF's C++ logging


class RunFailed(Exception):
    """One run of a configuration produced no timings; the message says which process and why."""


@dataclasses.dataclass
class Launch:
    name: str
    role: list              # arguments after ``--role``
    node: object            # node index, None: all nodes
    children_node: object   # node of the processes this one starts
    reporter: bool = False  # worker 0: talks to the harness


def launches(config):
    """The processes the harness starts for ``config``, in start order (worker 0 last)."""
    if config in BUILDERS or config in VARIANTS or config in KERAS_ADAM or config in ACCUMULATED:
        builder, arguments = VARIANTS.get(config, (KERAS_ADAM.get(config, ACCUMULATED.get(config, (config,))[0]),
                                                   {}))
        role = ["autodist", "--builder", builder, "--builder-args", json.dumps(arguments), "--spec", SPEC]
        if config in KERAS_ADAM:
            role += ["--optimizer", "keras_adam"]
        if config in ACCUMULATED:
            role += ["--accumulation", str(ACCUMULATED[config][1])]
        return [Launch("chief", role, 0, 1, reporter=True)]
    if config == "single":
        return [Launch("single", ["single", "--workers", str(WORKERS)], None, None, reporter=True)]
    ports = free_ports(WORKERS + 1)
    workers = ["{}:{}".format(NODES[k], ports[k + 1]) for k in range(WORKERS)]
    if config == "hand_ps":
        cluster = ["--cluster", json.dumps({"ps": ["{}:{}".format(NODES[0], ports[0])], "worker": workers})]
        first = [Launch("ps", ["hand_ps", "--task", "ps"] + cluster, 0, 0)]
        role = ["hand_ps"]
    else:
        cluster = ["--cluster", json.dumps({"worker": workers})]
        first = []
        role = ["mwms", "--pack", str(PACK_25MIB if config == "mwms_25mib" else 0)]
    return first + [Launch("worker{}".format(k), role + ["--task", str(k)] + cluster, k, k, reporter=k == 0)
                    for k in reversed(range(WORKERS))]


def free_ports(count):
    """``count`` distinct free TCP ports (TensorFlow servers listen on 0.0.0.0)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("0.0.0.0", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def child_env(args, config):
    # PYTHONSAFEPATH: a ``-c`` / ``-m`` child must import autodist from --package-root, not from the cwd
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONSAFEPATH="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.package_root, os.environ.get("PYTHONPATH")) if p)
    env.pop("TF_CONFIG", None)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        env.pop(name, None)
        if args.threads:
            env[name] = str(args.threads * (WORKERS if config == "single" else 1))
    return env


def _last_lines(proc, count=6):
    lines = [line for line in proc.tail if line.strip() and not NOISE.search(line)]
    return " | ".join(lines[-count:]) or "(no output)"


def await_event(table, events, name, deadline, timeout, starting):
    """Worker 0's ``name`` event; RunFailed when a process exits first or the deadline passes."""
    next_pin = 0.0
    while True:
        try:
            event = events.get(timeout=TICK)
        except queue.Empty:
            event = None
        if event is not None and event["event"] == name:
            return event
        for proc in list(table.procs.values()):
            code = proc.popen.poll() if proc.popen is not None else None
            if code is not None:
                raise RunFailed("{} exited with code {} before '{}': {}".format(proc.name, code, name,
                                                                               _last_lines(proc)))
        if time.monotonic() > deadline:
            waiting = next(p for p in table.procs.values() if p.popen is not None and p.popen.stdin)
            raise RunFailed("no '{}' from {} within the timeout ({:.0f} s): {}".format(
                name, waiting.name, timeout, _last_lines(waiting)))
        if starting and time.monotonic() >= next_pin:   # pin what the processes start, as they start it
            table.discover()
            table.pin_all()
            next_pin = time.monotonic() + 1.0


def _tell(proc, word):
    proc.popen.stdin.write((word + "\n").encode())
    proc.popen.stdin.flush()


def measure(table, events, reporter, release, timeout):
    """From worker 0's 'ready' to its 'done': the timed steps, their CPU time and traffic; then its 'loss'."""
    deadline = time.monotonic() + timeout
    await_event(table, events, "ready", deadline, timeout, starting=True)
    table.discover()
    table.pin_all()
    cpu_before, sockets_before = table.cpu(), socket_snapshot()
    _tell(reporter, "go")
    done = await_event(table, events, "done", deadline, timeout, starting=False)
    table.discover()
    cpu_after, sockets_after = table.cpu(), socket_snapshot()
    _tell(reporter, "loss")   # computed after the counters were read (a new fetch's first run is not a step)
    done["loss"] = await_event(table, events, "loss", deadline, timeout, starting=False).get("loss")
    with open(release, "w"):
        pass
    _tell(reporter, "end")
    sent, cross = traffic(sockets_before, sockets_after, table.node_of())
    cpu = sum(seconds - cpu_before.get(pid, 0.0) for pid, seconds in cpu_after.items())
    return {"ms": done["ms"], "cpu_s": cpu, "sent": sent, "cross_node": cross, "loss": done.get("loss")}


def run_config(model, config, args):
    """One run of ``config`` on ``model``: a dict of timings and counters; RunFailed if none came."""
    table = ProcessTable(args.cores, WORKERS, args.pin)
    events = queue.Queue()
    workdir = tempfile.mkdtemp(prefix="step-time-")
    release = os.path.join(workdir, "release")
    steps = args.steps or MODELS[model].steps
    common = ["--model", model, "--warmup", str(args.warmup), "--steps", str(steps),
              "--timeout", str(args.timeout), "--release", release]
    env = child_env(args, config)
    try:
        reporter = None
        for launch in launches(config):
            argv = [sys.executable, SCRIPT, "--role"] + launch.role[:1] + common + launch.role[1:]
            sink = _reporter_sink(events) if launch.reporter else _ignore
            proc = table.start(launch.name, argv, launch.node, launch.children_node, env, REPO, launch.reporter, sink)
            reporter = proc if launch.reporter else reporter
        result = measure(table, events, reporter, release, args.timeout)
        codes = table.wait_started(FINISH)
        result["notes"] = ["{} exited with {} after the timed steps".format(name, code)
                           for name, code in codes.items() if code != 0]
        return result
    finally:
        _stop_uninterrupted(table)
        shutil.rmtree(workdir, ignore_errors=True)


def _stop_uninterrupted(table):
    """Stop every process of the run; a Ctrl-C or SIGTERM meanwhile takes effect once they are gone."""
    pending = []
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        table.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


def _reporter_sink(events):
    def sink(proc, line):
        if line.startswith(MARKER):
            events.put(json.loads(line[len(MARKER):]))
    return sink


def _ignore(proc, line):
    pass
