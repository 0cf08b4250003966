"""TensorBoard output: per-node scalars of a session, the user's own values, graphs for the graph view."""
import glob
import os

import numpy as np
import tensorflow as tf

from autodist import AutoDist
from autodist.runtime.watch.summaries import ScalarLog, node_bytes_per_step, write_graph
from autodist.strategies import AllReduce
from autodist.strategies.report import DeviceRow, PlanReport

tf1 = tf.compat.v1


def _events(directory):
    """``[(step, {tag: value})]`` of the one event file in ``directory``, read by TensorFlow's own reader."""
    files = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
    assert len(files) == 1, files
    return list(tf1.train.summary_iterator(files[0]))


def _scalars(directory):
    return [(e.step, {v.tag: v.simple_value for v in e.summary.value}) for e in _events(directory)
            if e.summary.value]


def test_a_session_with_a_logdir_writes_step_time_examples_bytes_and_the_users_loss(spec, tmp_path):
    ad = AutoDist(spec, AllReduce(), logdir=str(tmp_path))
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 2])
        w = tf.Variable(tf.ones([2, 1]))
        loss = tf.reduce_sum(tf.matmul(x, w))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        session = ad.create_distributed_session()
        for _ in range(3):
            value, _ = session.run([loss, train], {x: np.ones([8, 2], np.float32)})
            ad.log_scalar("loss", value)
    ad._job.scalars.close()   # what the process's exit does
    scalars = _scalars(str(tmp_path / "node-0"))
    steps = [(step, values) for step, values in scalars if "autodist/step_time_s" in values]
    assert [step for step, _ in steps] == [1, 2, 3]
    for _, values in steps:
        assert values["autodist/step_time_s"] > 0
        assert abs(values["autodist/examples_per_s"] - 8 / values["autodist/step_time_s"]) < 1e-3 * values[
            "autodist/examples_per_s"]
        # two CPU replicas of one node all-reduce 8 bytes: each sends and receives 8 B (2 (N-1)/N * 8)
        assert values["autodist/bytes_per_step"] == 32
    # a scalar fetch comes from replica 0, which sums its 4 rows of ones times w = 1
    assert [(step, values["loss"]) for step, values in scalars if "loss" in values][0] == (1, 8.0)


def test_scalar_log_steps_and_explicit_steps(tmp_path):
    log = ScalarLog(str(tmp_path), node=3)
    log.step(0.5, 10)
    log.step(0.25, 0)
    log.scalar("accuracy", 0.75, step=7)
    log.close()
    log.close()
    assert _scalars(str(tmp_path / "node-3")) == [
        (1, {"autodist/step_time_s": 0.5, "autodist/examples_per_s": 20.0}),
        (2, {"autodist/step_time_s": 0.25}), (7, {"accuracy": 0.75})]


def test_node_bytes_per_step_reads_compiled_and_builder_device_names():
    devices = (DeviceRow("/job:worker/task:1/device:CPU:0", ("replica",), 0, 10, 20),
               DeviceRow("10.0.0.2:GPU:0", ("replica",), 0, 1, 2), DeviceRow("10.0.0.1:CPU:0", ("server",), 0, 5, 5))
    report = PlanReport("id", "", (), (), devices, 1.0, 0)
    assert node_bytes_per_step(report, 1, "10.0.0.2") == 33
    assert node_bytes_per_step(report, 0, "10.0.0.1") == 10


def test_a_written_graph_is_in_the_event_file(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        tf.add(tf.constant(1.0, name="one"), 2.0, name="sum")
    write_graph(str(tmp_path), graph.as_graph_def())
    graph_defs = [e.graph_def for e in _events(str(tmp_path)) if e.graph_def]
    restored = tf1.GraphDef.FromString(graph_defs[0])
    assert {n.name for n in restored.node} >= {"one", "sum"}
