"""What builders read: which variables a strategy covers, with what facts, on which devices."""
import subprocess
import sys

import pytest

from autodist.errors import StrategyError
from autodist.capture.graph_item import GradRecord
from autodist.strategies.inputs import (BuilderVariable, all_cpu_servers, first_cpu_server,
                                           builder_variables, replica_devices)


def test_builder_variables_follow_the_gradient_records(graph_item):
    variables = builder_variables(graph_item)
    assert [v.name for v in variables] == ["W:0", "b:0", "emb:0", "loop_w:0"], \
        "record order; 'frozen' has no gradient and is not planned"
    w, b, emb, loop_w = variables
    assert (w.op_name, w.shape, w.dtype, w.byte_size) == ("W", (4, 3), "float32", 48)
    assert b.shape == (3,) and b.byte_size == 12
    assert emb.is_sparse and not w.is_sparse and not loop_w.is_sparse
    assert loop_w.in_control_flow and not w.in_control_flow and not emb.in_control_flow
    assert all(v.shape_known for v in variables)


def test_builder_variables_read_the_graph_in_place(graph_item):
    """No IR of the whole graph is built to plan (a 10k-variable graph's IR cost more than its plan)."""
    item = graph_item.copy()
    builder_variables(item)
    assert "ir" not in item.__dict__.get("_property_cache", {})


def test_sparse_comes_from_the_record_not_the_read_pattern(graph_item):
    import tensorflow as tf
    from autodist.capture.optimizers import capture_optimizers
    from autodist.capture.graph_item import GraphItem
    from autodist.ir.variables import variable_infos

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            ids = tf1.placeholder(tf.int32, [None])
            emb = tf1.get_variable("emb", initializer=tf.zeros([6, 2]))
            # read sparsely and densely: TF sums the two into a dense gradient
            loss = tf.reduce_sum(tf.gather(emb, ids)) + tf.reduce_sum(emb)
            tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    assert variable_infos(item.ir, ["emb"])[0].is_sparse, "the IR sees a gather read"
    assert not item.grad_records[0].is_sparse
    assert not builder_variables(item)[0].is_sparse


def test_a_target_that_is_not_a_variable_is_named(graph_item):
    item = graph_item.copy()
    item.add_grad_records([GradRecord(target="x:0", grad="x:0")])
    with pytest.raises(StrategyError, match="'x'.*Placeholder"):
        builder_variables(item)
    item = graph_item.copy()
    item.add_grad_records([GradRecord(target="W:1", grad="x:0")])
    with pytest.raises(StrategyError, match="output 1 of op 'W'"):
        builder_variables(item)


def test_shape_known():
    assert BuilderVariable("a:0", "a", (2, 3), "float32", 24, False).shape_known
    assert BuilderVariable("a:0", "a", (), "float32", 4, False).shape_known
    assert not BuilderVariable("a:0", "a", (None, 3), "float32", 12, False).shape_known
    assert not BuilderVariable("a:0", "a", None, "float32", 4, False).shape_known


def test_replicas_are_gpus_or_the_cpus_of_gpu_less_nodes(two_nodes, one_cpu, two_gpus):
    assert replica_devices(two_nodes) == ["10.0.0.2:GPU:0", "10.0.0.2:GPU:1",
                                          "10.0.0.1:CPU:0", "10.0.0.1:CPU:1"]
    assert replica_devices(one_cpu) == ["127.0.0.1:CPU:0"]
    assert replica_devices(two_gpus) == ["127.0.0.1:GPU:0", "127.0.0.1:GPU:1"]


def test_servers(two_nodes):
    assert first_cpu_server(two_nodes) == ["10.0.0.2:CPU:0"], "the first node listed, not sorted"
    assert all_cpu_servers(two_nodes) == ["10.0.0.2:CPU:0", "10.0.0.1:CPU:0", "10.0.0.1:CPU:1"]


def test_importing_the_strategies_does_not_import_tensorflow():
    code = ("import sys, autodist.strategies, autodist.strategies.report; "
            "sys.exit('tensorflow' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_a_half_gradient_is_planned_in_float16_unless_the_input_is_read_ahead():
    """Uneven inputs weigh a gradient by its rows before the synchronization, a product float16's range may
    not hold: the kernel sends such gradients in float32, and the plan report and cost model count them so."""
    import tensorflow as tf
    from autodist.capture.datasets.uneven import PROGRESS
    from autodist.capture.graph_item import GraphItem
    from autodist.capture.optimizers import capture_optimizers

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            w = tf1.get_variable("w", initializer=tf.ones([4]))
            loss = tf.reduce_sum(tf.cast(tf.square(tf.cast(w, tf.float16)), tf.float32))
            tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    item.prepare()
    assert builder_variables(item)[0].grad_dtype == "float16"
    with graph.as_default():
        tf.zeros([2], name=PROGRESS)   # what AutoDist(uneven_inputs=...) records in the captured graph
    assert builder_variables(item)[0].grad_dtype is None
