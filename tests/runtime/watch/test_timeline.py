"""The merged timeline: op classes, step stats -> node traces -> one Chrome trace, clocks, per-step summary.

Recorded step stats are built as TensorFlow's ``StepStats`` protos (two nodes,
hand-made times, so every number below is checked exactly); one real session
checks that a traced call of a DistributedSession lands in the files.
"""
import atexit
import io
import json
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2

from autodist import AutoDist
from autodist.runtime.watch.timeline import (SUMMARY_FILE, TIMELINE_FILE, StepTracer, classify, clock_offsets,
                                       format_summary, merge_traces, node_trace, read_node_file, step_summaries)
from autodist.strategies import AllReduce

tf1 = tf.compat.v1


def test_ops_are_told_apart_by_type_and_autodist_names():
    assert classify("CollectiveReduceV2") == "communication,collective"
    assert classify("_Recv") == "communication,send/recv"
    assert classify("RecvTensor") == "communication,send/recv"
    assert classify("ResourceAccumulatorApplyGradient") == "communication,accumulator"
    assert classify("QueueDequeueV2") == "communication,barrier"
    assert classify("MatMul") == "compute"
    assert classify("Identity", "AutoDist-Init/sync/broadcast") == "communication,collective"


def _stats(device, ops):
    """StepStats of one device: ops as (name, type, start_us, duration_us)."""
    stats = step_stats_pb2.StepStats()
    dev = stats.dev_stats.add(device=device)
    dev.node_stats.add(node_name="_SOURCE", timeline_label="_SOURCE = NoOp()", all_start_micros=1)
    for name, op_type, start, duration in ops:
        dev.node_stats.add(node_name=name, timeline_label="{} = {}(a, b)".format(name, op_type),
                           all_start_micros=start, all_end_rel_micros=duration, op_end_rel_micros=duration)
    return stats


def _node(task, host, steps):
    return {"task": task, "address": "10.0.0.{}".format(task + 1), "host": host, "steps": steps}


def _two_nodes(second_host):
    """Node 0: compute 1000-1400, all-reduce 1300-1700 (step 1000-1800). Node 1's clock is 5000 us ahead."""
    chief = node_trace(_stats("/job:worker/replica:0/task:0/device:CPU:0",
                              [("dense/MatMul", "MatMul", 1000, 400), ("ar/reduce", "CollectiveReduceV2", 1300, 400)]),
                       step=5, start_us=1000, end_us=1800)
    other = node_trace(_stats("/job:worker/replica:0/task:1/device:CPU:0",
                              [("dense/MatMul", "MatMul", 6100, 200), ("x/_Recv", "_Recv", 6400, 300)]),
                       step=5, start_us=6000, end_us=6800)
    return [_node(0, "a", [chief]), _node(1, second_host, [other])]


def test_a_node_trace_keeps_each_op_with_its_device_type_and_times():
    trace = node_trace(_stats("/job:worker/replica:0/task:0/device:CPU:0", [("m", "MatMul", 100, 30)]), 5, 90, 200)
    assert trace == {"step": 5, "start_us": 90, "end_us": 200,
                     "ops": [["/job:worker/replica:0/task:0/device:CPU:0", "m", "MatMul", 100, 130]]}


def test_nodes_on_one_host_share_a_clock_and_others_are_aligned_on_their_step_ends():
    assert clock_offsets(_two_nodes("a")) == {0: 0, 1: 0}
    assert clock_offsets(_two_nodes("b")) == {0: 0, 1: -5000}
    assert clock_offsets(_two_nodes("b"), reference=1) == {0: 5000, 1: 0}


def test_merged_trace_has_a_pid_per_node_categories_and_aligned_times():
    trace = merge_traces(_two_nodes("b"))
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "step"]
    assert {(e["pid"], e["name"], e["cat"], e["ts"], e["dur"]) for e in ops} == {
        (0, "MatMul", "compute", 1000, 400), (0, "CollectiveReduceV2", "communication,collective", 1300, 400),
        (1, "MatMul", "compute", 1100, 200), (1, "_Recv", "communication,send/recv", 1400, 300)}
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {(0, "node 0 (10.0.0.1)"), (1, "node 1 (10.0.0.2)")}
    steps = [(e["pid"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e.get("cat") == "step"]
    assert steps == [(0, 1000, 800), (1, 1000, 800)]
    assert json.loads(json.dumps(trace)) == trace


def test_step_summary_splits_wall_time_into_compute_communication_overlap_and_idle():
    rows = step_summaries(merge_traces(_two_nodes("b")))
    assert rows == [
        {"node": 0, "step": 5, "wall_ms": 0.8, "compute_ms": 0.4, "communication_ms": 0.4, "overlap_ms": 0.1,
         "idle_ms": 0.1},
        {"node": 1, "step": 5, "wall_ms": 0.8, "compute_ms": 0.2, "communication_ms": 0.3, "overlap_ms": 0.0,
         "idle_ms": 0.3}]
    text = format_summary(rows, "/d/timeline.json")
    assert "/d/timeline.json" in text and "compute ms" in text and len(text.splitlines()) == 4


def test_a_traced_session_writes_the_timeline_of_its_chosen_steps(spec, tmp_path):
    ad = AutoDist(spec, AllReduce(), trace_dir=str(tmp_path))
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 2])
        w = tf.Variable(tf.ones([2, 1]))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(x, w)))
        session = ad.create_distributed_session()
        for _ in range(15):
            session.run(train, {x: np.ones([4, 2], np.float32)})
        target = session.sess_str
    trace = json.loads((tmp_path / TIMELINE_FILE).read_text())
    steps = sorted(e["args"]["step"] for e in trace["traceEvents"] if e.get("cat") == "step")
    assert steps == [5, 10, 15]
    cats = {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert "compute" in cats and any(c.startswith("communication,") for c in cats)
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert [r["step"] for r in summary] == [5, 10, 15] and all(r["wall_ms"] > 0 for r in summary)
    # the transport the chief uses for the other nodes' files: a ReadFile op on the node, through its server
    node_file = (tmp_path / "node-0.json").read_bytes()
    assert read_node_file(target, 0, str(tmp_path / "node-0.json"), deadline=time.monotonic() + 30) == node_file
    assert read_node_file(target, 0, str(tmp_path / "absent.json"), deadline=time.monotonic() + 0.5) is None


def test_only_the_chosen_calls_get_trace_options(tmp_path):
    tracer = StepTracer(str(tmp_path), task=0, address="10.0.0.1", num_tasks=1, is_chief=True, steps=(2,),
                        out=io.StringIO())
    assert tracer.options() is None
    options, metadata, _ = tracer.options()
    assert options.trace_level == tf1.RunOptions.FULL_TRACE and tracer.calls == 2
    metadata.step_stats.CopyFrom(_stats("/job:worker/replica:0/task:0/device:CPU:0", [("m", "MatMul", 10, 5)]))
    tracer.finish_step(metadata, 5)
    assert tracer.written == str(tmp_path / TIMELINE_FILE)
    assert tracer.options() is None


def test_an_unwritable_trace_directory_is_a_clear_error(tmp_path):
    from autodist.errors import SessionError
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SessionError, match="node 10.0.0.2: cannot create the trace directory .*file/trace"):
        StepTracer(str(blocker / "trace"), task=1, address="10.0.0.2", num_tasks=2, is_chief=False)


def test_a_job_too_short_for_the_last_traced_call_says_so(tmp_path, capsys):
    tracer = StepTracer(str(tmp_path), task=0, address="10.0.0.1", num_tasks=1, is_chief=True, out=io.StringIO())
    for _ in range(7):
        tracer.options()
    tracer.note_unwritten()
    atexit.unregister(tracer.note_unwritten)   # said once here, not again when pytest exits
    assert "not written: the job made 7 session calls, and the timeline is written after call 15 (calls 5, 10, " \
           "15 are traced)" in capsys.readouterr().err
