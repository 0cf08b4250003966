"""The merged timeline: a few steps traced on every node, one Chrome-trace file on the chief.

    DistributedSession.run  --(steps TRACE_STEPS)-->  RunOptions(FULL_TRACE) + RunMetadata.step_stats
    StepTracer.finish_step  -->  <trace_dir>/node-<task>.json        every node, after its last traced step
    StepTracer (the chief)  -->  merge_traces(...)  -->  <trace_dir>/timeline.json   {"traceEvents": [...]}
                                                        <trace_dir>/timeline_summary.json (+ printed)

Every node runs the same script, so session call ``n`` is the same training
step on every node; the same call numbers are traced everywhere. Each node
writes its file into the trace directory on its own machine (the same
absolute path: nodes run from the chief's working directory). After its own
last traced step the chief reads the other nodes' files through the job's
TensorFlow servers (``read_node_file``: a ``ReadFile`` op placed on that
node), waiting up to ``TRACE_WAIT`` s in all, and names any node whose file
did not appear; a trace is tens of kilobytes, read once per job.

Clocks: TensorFlow stamps ops with the wall clock of the machine that ran
them. Nodes on one host (same hostname) share that clock: offset 0. For a
node on another host the offset is estimated from the synchronous steps:
every node leaves a traced step when the same collective or barrier
completes, so ``offset = median over traced steps of (chief's step end - the
node's step end)``, each read on its own clock right after ``run`` returns.
The error is the spread of those step ends (about 0.5 ms on two loopback
nodes, measured against their shared clock); asynchronous strategies have no
common step end and keep a larger error.

In the trace: one pid per node (named by its address), one tid per device;
each op's ``cat`` is ``compute`` or ``communication,<kind>`` (``classify``).
"""
import atexit
import json
import os
import re
import socket
import statistics
import sys
import time

from autodist.errors import SessionError
from autodist.fileio import atomic_write_bytes
from autodist.plan.names import INIT_OPS, host_cpu

__all__ = ["TRACE_STEPS", "TRACE_WAIT", "StepTracer", "read_node_file", "writable_directory", "classify", "node_trace", "merge_traces",
           "step_summaries", "format_summary", "clock_offsets", "TIMELINE_FILE", "SUMMARY_FILE"]

TRACE_STEPS = (5, 10, 15)     # session calls traced (1-based): past the first, slow calls
TRACE_WAIT = 30.0             # s the chief waits for the other nodes' trace files
TIMELINE_FILE = "timeline.json"
SUMMARY_FILE = "timeline_summary.json"

# Communication, by op type: (kind, op types). Anything else is compute.
_COMMUNICATION = (
    ("collective", ("CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather",
                    "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastRecv",
                    "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2",
                    "CollectiveAllToAllV3", "NcclAllReduce")),
    ("send/recv", ("_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv", "RecvTensor")),
    ("accumulator", ("ConditionalAccumulator", "SparseConditionalAccumulator", "AccumulatorApplyGradient",
                     "AccumulatorTakeGradient", "AccumulatorNumAccumulated", "AccumulatorSetGlobalStep",
                     "SparseAccumulatorApplyGradient", "SparseAccumulatorTakeGradient",
                     "ResourceAccumulatorApplyGradient", "ResourceAccumulatorTakeGradient",
                     "ResourceAccumulatorNumAccumulated", "ResourceAccumulatorSetGlobalStep",
                     "ResourceConditionalAccumulator")),
    ("barrier", ("FIFOQueue", "FIFOQueueV2", "QueueEnqueue", "QueueEnqueueV2", "QueueEnqueueMany",
                 "QueueEnqueueManyV2", "QueueDequeue", "QueueDequeueV2", "QueueDequeueMany",
                 "QueueDequeueManyV2", "QueueSize", "QueueSizeV2", "Barrier", "BarrierTakeMany",
                 "BarrierInsertMany")),
)
_KIND_OF = {op_type: kind for kind, types in _COMMUNICATION for op_type in types}
# Ops autodist adds under these name scopes move data between nodes whatever their type.
_COMMUNICATION_SCOPES = tuple(op + "/" for op in INIT_OPS)
_TASK = re.compile(r"/task:(\d+)/")   # TensorFlow's device names carry a replica part: /job:w/replica:0/task:1/...


def classify(op_type, name=""):
    """``"compute"`` or ``"communication,<kind>"`` for an op of ``op_type`` named ``name``.

    ``classify("CollectiveReduceV2") == "communication,collective"``;
    ``classify("_Recv") == "communication,send/recv"``; ``classify("MatMul") == "compute"``.
    """
    kind = _KIND_OF.get(op_type)
    if kind is None and name.startswith(_COMMUNICATION_SCOPES):
        kind = "collective"
    return "compute" if kind is None else "communication," + kind


def _op_type(node_stats):
    """The op type TensorFlow writes into ``timeline_label`` (``"name = Type(inputs)"``)."""
    label = node_stats.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0].strip()
    return node_stats.node_name.split(":", 1)[0]


def node_trace(step_stats, step, start_us, end_us):
    """One traced step of one node, from TensorFlow's ``StepStats``: a JSON-ready dict.

    ``{"step": 5, "start_us": ..., "end_us": ..., "ops": [[device, name, type, start_us, end_us], ...]}``;
    op times are in the clock of the device's machine, the step's in this node's.
    """
    ops = []
    for device in step_stats.dev_stats:
        for ns in device.node_stats:
            if ns.node_name == "_SOURCE" or not ns.all_start_micros:
                continue
            begin = ns.all_start_micros
            ops.append([device.device, ns.node_name, _op_type(ns), begin,
                        begin + max(ns.all_end_rel_micros, ns.op_end_rel_micros, 1)])
    return {"step": step, "start_us": start_us, "end_us": end_us, "ops": ops}


class StepTracer:
    """Traces session calls ``steps`` of one node; writes its file, and on the chief the merged timeline.

    The session asks ``options()`` before each call (None: run as usual, the
    cheap path) and hands the ``RunMetadata`` back to ``finish_step``.
    ``target`` is this node's server (the chief reads the other nodes' files
    through the job's servers, ``read_node_file``).
    """

    def __init__(self, trace_dir, task, address, num_tasks, is_chief, target=None, steps=TRACE_STEPS,
                 wait=TRACE_WAIT, out=None):
        self.trace_dir = writable_directory(trace_dir, "trace", address)
        self.task, self.address, self.num_tasks, self.is_chief = task, address, num_tasks, is_chief
        self.target = target
        self.steps = frozenset(steps)
        self._last = max(self.steps)
        self._wait = wait
        self._out = out if out is not None else sys.stdout
        self._traces = []
        self.calls = 0
        self.written = None    # the merged timeline's path, once written
        if is_chief:
            atexit.register(self.note_unwritten)

    def note_unwritten(self):
        """At the chief's exit: say why there is no timeline when the job ended before the last traced call."""
        if self.written is None and self.calls < self._last:
            print("autodist: timeline: not written: the job made {} session calls, and the timeline is written "
                  "after call {} (calls {} are traced)".format(self.calls, self._last, ", ".join(
                      str(s) for s in sorted(self.steps))), file=sys.stderr, flush=True)

    def options(self):
        """``(RunOptions, RunMetadata, start_us)`` when this call is traced, else None; counts every call."""
        self.calls += 1
        if self.calls not in self.steps:
            return None
        import tensorflow as tf
        return (tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE), tf.compat.v1.RunMetadata(),
                int(time.time() * 1e6))

    def finish_step(self, metadata, start_us):
        """Keep the traced call's stats; after the last one, write this node's file (and merge)."""
        self._traces.append(node_trace(metadata.step_stats, self.calls, start_us, int(time.time() * 1e6)))
        if self.calls == self._last:
            self._write()

    def node_file(self, task):
        return os.path.join(self.trace_dir, "node-{}.json".format(task))

    def _write(self):
        data = {"task": self.task, "address": self.address, "host": socket.gethostname(), "steps": self._traces}
        atomic_write_bytes(self.node_file(self.task), json.dumps(data).encode(), mode=0o644)
        if self.is_chief:
            self.written = self.merge(data)

    def merge(self, own):
        """Fetch the other nodes' files (``wait`` s in all), write timeline.json and the summary; its path."""
        deadline = time.monotonic() + self._wait
        nodes, missing = [own], []
        for task in range(self.num_tasks):
            if task != self.task:
                data = read_node_file(self.target, task, self.node_file(task), deadline)
                (nodes.append(json.loads(data)) if data is not None else missing.append(task))
        if missing:
            print("autodist: timeline: no trace from node(s) {} within {:.0f} s (their {} did not appear); "
                  "the timeline shows the other nodes".format(
                      ", ".join(str(t) for t in missing), self._wait,
                      ", ".join(self.node_file(t) for t in missing)), file=sys.stderr, flush=True)
        trace = merge_traces(sorted(nodes, key=lambda n: n["task"]), reference=self.task)
        path = os.path.join(self.trace_dir, TIMELINE_FILE)
        atomic_write_bytes(path, json.dumps(trace).encode(), mode=0o644)
        summaries = step_summaries(trace)
        atomic_write_bytes(os.path.join(self.trace_dir, SUMMARY_FILE),
                           json.dumps(summaries, indent=2).encode(), mode=0o644)
        print(format_summary(summaries, path), file=self._out, flush=True)
        return path


def read_node_file(target, task, path, deadline, interval=0.2):
    """The bytes of ``path`` on node ``task``, read there by the job's TensorFlow servers; None by ``deadline``.

    A ``ReadFile`` op placed on the node's CPU runs in a session on this
    node's server (``target``): the bytes come back over the job's own gRPC
    channels, so no shared file system and no extra connection is needed.
    A missing file is retried every ``interval`` s until ``deadline`` (monotonic).
    The ``RunOptions`` timeout bounds a read, but not the session's creation
    on the master, which waits for every server of the cluster (a stopped
    node's forever): the reads run on a watched thread that gives up at the
    deadline, and the session is closed within a bound.
    """
    import tensorflow as tf
    from autodist.runtime.session.distributed import WatchedCaller, close_bounded
    graph = tf.Graph()
    with graph.as_default(), tf.device(host_cpu(task)):
        data = tf.io.read_file(path)
    late = tf.errors.DeadlineExceededError(None, None, "node {} did not answer by the deadline".format(task))
    caller = WatchedCaller(lambda: late if time.monotonic() > deadline + interval else None, interval=interval)
    session = tf.compat.v1.Session(target, graph=graph)
    try:
        while True:
            remaining = deadline - time.monotonic()
            options = tf.compat.v1.RunOptions(timeout_in_ms=max(int(remaining * 1000), 1))
            try:
                return caller(lambda: session.run(data, options=options))
            except (tf.errors.NotFoundError, tf.errors.DeadlineExceededError):
                if time.monotonic() + interval >= deadline:
                    return None
                time.sleep(interval)
            except tf.errors.OpError:   # the node is gone (its failure is the job's to report)
                return None
    finally:
        caller.close()
        close_bounded(session, troubled=caller.in_flight)


def writable_directory(path, what, address):
    """``path`` made absolute and created; SessionError naming the node and the option when it cannot be."""
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise SessionError("node {}: cannot create the {} directory {} ({}); give a writable directory".format(
            address, what, path, e.strerror or e)) from e
    return path


def clock_offsets(nodes, reference=None):
    """``{task: microseconds to add to that task's clock}`` to read it on task ``reference``'s clock.

    ``reference`` is the chief (the node that merges); by default the lowest task. See the module doc.
    """
    if not nodes:
        return {}
    by_task = {n["task"]: n for n in nodes}
    chief = by_task.get(reference, by_task[min(by_task)])
    offsets = {}
    for node in nodes:
        if node["host"] == chief["host"]:
            offsets[node["task"]] = 0
            continue
        chief_end = {s["step"]: s["end_us"] for s in chief["steps"]}
        deltas = [chief_end[s["step"]] - s["end_us"] for s in node["steps"] if s["step"] in chief_end]
        offsets[node["task"]] = int(statistics.median(deltas)) if deltas else 0
    return offsets


def _name_event(pid, tid, kind, name):
    return {"ph": "M", "pid": pid, "tid": tid, "name": kind, "args": {"name": name}}


def merge_traces(nodes, reference=None):
    """Node files -> ``{"traceEvents": [...]}``: pid = node task, tid = device, times on the chief's clock.

    Each op becomes a complete event (``"ph": "X"``) with ``cat`` from
    ``classify`` and ``args`` naming the traced step and the session that ran
    it; each traced step of each node is one more event (``cat`` ``step``).
    An op runs on some task's device; it goes to that task's pid, its time
    shifted by that task's offset (``clock_offsets``: onto task ``reference``'s clock).
    """
    offsets = clock_offsets(nodes, reference)
    addresses = {n["task"]: n["address"] for n in nodes}
    events, tids = [], {}
    for node in nodes:
        pid = node["task"]
        events.append(_name_event(pid, 0, "process_name", "node {} ({})".format(pid, node["address"])))
        for step in node["steps"]:
            shift = offsets.get(pid, 0)
            events.append({"ph": "X", "cat": "step", "name": "step {}".format(step["step"]), "pid": pid, "tid": 0,
                           "ts": step["start_us"] + shift, "dur": step["end_us"] - step["start_us"],
                           "args": {"step": step["step"]}})
            for device, name, op_type, begin, end in step["ops"]:
                task = _TASK.search(device)
                owner = int(task.group(1)) if task and int(task.group(1)) in addresses else pid
                key = (owner, device)
                if key not in tids:
                    tids[key] = len([k for k in tids if k[0] == owner]) + 1
                    events.append(_name_event(owner, tids[key], "thread_name", device))
                events.append({"ph": "X", "cat": classify(op_type, name), "name": op_type, "pid": owner,
                               "tid": tids[key], "ts": begin + offsets.get(owner, 0), "dur": end - begin,
                               "args": {"op": name, "step": step["step"], "session": pid}})
    events.append(_name_event(0, 0, "thread_name", "steps"))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"clock_offsets_us": {str(k): v for k, v in offsets.items()}}}


def _union(intervals):
    """Sorted, merged ``[(begin, end)]``."""
    merged = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def _length(intervals):
    return sum(end - begin for begin, end in intervals)


def _intersection(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        begin, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if begin < end:
            out.append((begin, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def step_summaries(trace):
    """Per node and traced step: wall, compute, communication, overlap and idle milliseconds.

    compute and communication are the lengths of the unions of those ops'
    intervals on the node's devices, overlap the length of their
    intersection, idle the part of the step's wall time covered by neither.
    """
    steps, ops = {}, {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        key = (e["pid"], e["args"]["step"])
        if e["cat"] == "step":
            steps[key] = (e["ts"], e["ts"] + e["dur"])
        else:
            kind = "compute" if e["cat"] == "compute" else "communication"
            ops.setdefault(key, {"compute": [], "communication": []})[kind].append((e["ts"], e["ts"] + e["dur"]))
    rows = []
    for (pid, step), (begin, end) in sorted(steps.items()):
        kinds = ops.get((pid, step), {"compute": [], "communication": []})
        compute, comm = _union(kinds["compute"]), _union(kinds["communication"])
        busy = _union([(max(b, begin), min(e, end)) for b, e in compute + comm if min(e, end) > max(b, begin)])
        wall = end - begin
        rows.append({"node": pid, "step": step, "wall_ms": wall / 1e3, "compute_ms": _length(compute) / 1e3,
                     "communication_ms": _length(comm) / 1e3,
                     "overlap_ms": _length(_intersection(compute, comm)) / 1e3,
                     "idle_ms": max(wall - _length(busy), 0) / 1e3})
    return rows


def format_summary(rows, path):
    """The summary table printed on the chief."""
    lines = ["autodist: timeline {} (open it in https://ui.perfetto.dev or chrome://tracing)".format(path),
             "  node  step   wall ms  compute ms  comm ms  overlap ms  idle ms"]
    for r in rows:
        lines.append("  {node:>4}  {step:>4}  {wall_ms:8.2f}  {compute_ms:10.2f}  {communication_ms:7.2f}  "
                     "{overlap_ms:10.2f}  {idle_ms:7.2f}".format(**r))
    return "\n".join(lines)
