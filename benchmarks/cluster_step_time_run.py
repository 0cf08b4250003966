"""One run of one configuration on an emulated cluster (``autodist cluster``): its processes, its counters.

    result = run_on_cluster(cluster, "mlp", "AllReduce", args)
    # {"ms": [...worker 0's timed steps...], "cpu_s": ..., "cpu_wall_s": ..., "node_bytes": {address: [rx, tx]},
    #  "loss": ..., "cpu_threads": {thread kind: s}, "peak_rss": {address: bytes}, "ready": {"startup_s": ...},
    #  "notes": []}

The processes are ``step_time.py --role ...`` (``step_time_roles``: the same
roles, protocol and models as on loopback), each started inside its node's
namespace (``ip netns exec``) and pinned to its node's core (``ProcessTable``);
autodist's chief starts the other node itself, over SSH with the cluster's
spec (whose ``cores`` pin it). Between worker 0's ``ready`` and ``done`` the
harness reads every node's interface counters (bytes in and out of eth0:
everything that crossed its link) and the CPU time of every process in the
cluster's namespaces (the training processes and the sshd sessions carrying
the other node's output; ``cpu_wall_s``: the wall time between the two
reads), in all and per kind of thread (``cpu_threads``: a
thread's name less its number, ``tf_Compute``, ``collective_ops``,
``event_engine``, ``python``...; threads that ended in between count in
``cpu_s`` only). After ``done`` it also reads each node's peak memory
(the sum of its processes' ``VmHWM``), then asks worker 0 for the loss (a
fetch the timed steps did not run: its first run is not counted), and keeps
what worker 0 said with ``ready`` (the seconds to its first step; autodist's
chief: planning and rewriting). Every process of the run is stopped by pid at the
end; what runs on the other node ends with the chief's job (and the cluster's
``down`` stops whatever is left in its namespaces).
"""
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time

from step_time_models import model_named
from step_time_procs import ProcessTable, cpu_seconds, thread_cpu_seconds
from step_time_run import (FINISH, KERAS_ADAM, PACK_25MIB, VARIANTS, _reporter_sink, _ignore, _stop_uninterrupted,
                           _tell, await_event, child_env)

__all__ = ["run_on_cluster", "node_bytes", "namespace_pids", "peak_rss", "COMPUTE"]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(HERE, "step_time.py")
COMPUTE = "compute"      # one replica's step alone (per-worker batch, one core): the lower bound's compute
_PORTS = (23400, 23401)   # the baselines' TensorFlow ports (each node's own network stack: nothing else there)


def node_bytes(names, count):
    """``{address: [bytes received, bytes sent]}`` of every node's link (its eth0) so far."""
    found = {}
    for index in range(count):
        out = subprocess.run(["ip", "-n", names.namespace(index), "-s", "-j", "link", "show", names.node_link],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        stats = json.loads(out)[0]["stats64"]
        found[names.address(index)] = [stats["rx"]["bytes"], stats["tx"]["bytes"]]
    return found


def namespace_pids(names, count, index=None):
    """Pids of the processes in every node's namespace (``index``: that node's only)."""
    pids = []
    for node in range(count) if index is None else (index,):
        out = subprocess.run(["ip", "netns", "pids", names.namespace(node)], capture_output=True, text=True,
                             timeout=30).stdout
        pids += [int(p) for p in out.split()]
    return pids


def _high_water(pid):
    try:
        with open("/proc/{}/status".format(pid)) as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def peak_rss(names, count):
    """``{address: bytes}``: the sum of the peak resident memory (``VmHWM``) of each node's processes so far."""
    return {names.address(i): sum(_high_water(p) for p in namespace_pids(names, count, i)) for i in range(count)}


def _launches(cluster, config):
    """``[(name, role argv, node, reporter)]`` in start order (worker 0 last)."""
    if config == COMPUTE:
        return [("compute", ["single", "--workers", "1"], 0, True)]
    addresses = [cluster.names.address(i) for i in range(cluster.nodes)]
    per_node = getattr(cluster, "replicas", 1)   # the baselines: one worker process per replica
    if config in ("hand_ps", "mwms", "mwms_25mib"):
        workers = ["{}:{}".format(a, _PORTS[1] + j) for a in addresses for j in range(per_node)]
        if config == "hand_ps":
            cluster_json = json.dumps({"ps": ["{}:{}".format(addresses[0], _PORTS[0])], "worker": workers})
            first = [("ps", ["hand_ps", "--task", "ps", "--cluster", cluster_json], 0, False)]
            role = ["hand_ps"]
        else:
            cluster_json = json.dumps({"worker": workers})
            first = []
            role = ["mwms", "--pack", str(PACK_25MIB if config == "mwms_25mib" else 0)]
        return first + [("worker{}".format(k), role + ["--task", str(k), "--cluster", cluster_json], k // per_node,
                         k == 0) for k in reversed(range(len(workers)))]
    builder, arguments = VARIANTS.get(config, (KERAS_ADAM.get(config, config), {}))
    role = ["autodist", "--builder", builder, "--builder-args", json.dumps(arguments), "--spec", cluster.spec]
    if config in KERAS_ADAM:
        role += ["--optimizer", "keras_adam"]
    return [("chief", role, 0, True)]


def _by_thread_kind(pids, before):
    """``{thread kind: CPU s}`` since ``before`` (``{pid: thread_cpu_seconds(pid)}``) over the threads of ``pids``
    alive now, largest first: a thread that ended in between counts in no kind (its process's ``cpu_s`` has it)."""
    total = {}
    for pid in pids:
        earlier = before.get(pid, {})
        for tid, (kind, seconds) in thread_cpu_seconds(pid).items():
            total[kind] = total.get(kind, 0.0) + seconds - earlier.get(tid, (kind, 0.0))[1]
    return dict(sorted(((k, round(v, 3)) for k, v in total.items()), key=lambda kv: -kv[1]))


def _measure(cluster, table, events, reporter, release, timeout):
    deadline = time.monotonic() + timeout
    ready = await_event(table, events, "ready", deadline, timeout, starting=True)
    pids = namespace_pids(cluster.names, cluster.nodes)
    cpu_before, bytes_before = {p: cpu_seconds(p) for p in pids}, node_bytes(cluster.names, cluster.nodes)
    window = time.monotonic()
    threads_before = {p: thread_cpu_seconds(p) for p in pids}
    _tell(reporter, "go")
    done = await_event(table, events, "done", deadline, timeout, starting=False)
    bytes_after = node_bytes(cluster.names, cluster.nodes)
    pids = namespace_pids(cluster.names, cluster.nodes)
    window = time.monotonic() - window
    cpu = sum(cpu_seconds(p) - cpu_before.get(p, 0.0) for p in pids)
    threads = _by_thread_kind(pids, threads_before)
    memory = peak_rss(cluster.names, cluster.nodes)
    _tell(reporter, "loss")   # computed after the counters were read (a new fetch's first run is not a step)
    done["loss"] = await_event(table, events, "loss", deadline, timeout, starting=False).get("loss")
    with open(release, "w"):
        pass
    _tell(reporter, "end")
    moved = {a: [after - before for after, before in zip(bytes_after[a], bytes_before[a])] for a in bytes_after}
    return {"ms": done["ms"], "cpu_s": cpu, "cpu_wall_s": window, "cpu_threads": threads, "node_bytes": moved,
            "loss": done.get("loss"), "peak_rss": memory,
            "ready": {key: value for key, value in ready.items() if key != "event"}}


def run_on_cluster(cluster, model, config, args):
    """One run of ``config`` on ``model`` in ``cluster``'s namespaces (module docstring); RunFailed if no timings."""
    table = ProcessTable(args.cores, cluster.nodes, args.pin)
    events = queue.Queue()
    workdir = tempfile.mkdtemp(prefix="cluster-step-time-")
    release = os.path.join(workdir, "release")
    steps = args.steps or model_named(model).steps
    common = ["--model", model, "--warmup", str(args.warmup), "--steps", str(steps), "--timeout", str(args.timeout),
              "--release", release]
    env = child_env(args, config)
    try:
        reporter = None
        for name, role, node, reports in _launches(cluster, config):
            argv = ["ip", "netns", "exec", cluster.names.namespace(node), sys.executable, SCRIPT, "--role"] + \
                role[:1] + common + role[1:]
            proc = table.start(name, argv, node, node, env, REPO, reports, _reporter_sink(events) if reports else _ignore)
            reporter = proc if reports else reporter
        result = _measure(cluster, table, events, reporter, release, args.timeout)
        codes = table.wait_started(FINISH)
        result["notes"] = ["{} exited with {} after the timed steps".format(name, code)
                           for name, code in codes.items() if code != 0]
        return result
    finally:
        _stop_uninterrupted(table)
        shutil.rmtree(workdir, ignore_errors=True)
