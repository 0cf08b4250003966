"""variable_infos on real TF graphs (tf1 layers, gathers, while loops, Keras 3) and synthetic IR."""
import numpy as np
import pytest

from autodist.ir import (
    IRGraph, OperationInfo, TensorInfo, VariableInfo, from_tf_graph, topologic_order_graph,
    variable_infos,
)
from autodist.ir.generic import GenericDType, GenericShape
from autodist.ir.variables import graph_variable_infos


def _infos(graph, **kwargs):
    return {info.op_name: info for info in variable_infos(from_tf_graph(graph), **kwargs)}


@pytest.fixture(scope="module")
def tf1_graph(tf):
    """dense kernel, resource embedding via tf.gather and embedding_lookup, ref var, while loop."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 5])
        ids = tf1.placeholder(tf.int64, [None])
        kernel = tf1.get_variable("dense/kernel", [5, 7])
        table = tf1.get_variable("table", [100, 16])
        lookup = tf1.get_variable("lookup", [50, 4], dtype=tf.float64)
        ref = tf1.get_variable("ref", [20, 3], use_resource=False)
        looped = tf1.get_variable("looped", [3])
        both = tf1.get_variable("both", [10, 2])
        y = tf.matmul(x, kernel)
        a = tf.gather(table, ids)
        b = tf.nn.embedding_lookup(lookup, ids)
        c = tf.gather(ref, ids)
        _, d = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v + looped),
                             [0, tf.zeros([3])])
        e = tf.gather(both, ids) + tf.reduce_sum(both)
        tf1.train.GradientDescentOptimizer(0.1).minimize(
            tf.reduce_sum(y) + tf.reduce_sum(a) + tf.cast(tf.reduce_sum(b), tf.float32) + tf.reduce_sum(c)
            + tf.reduce_sum(d) + tf.reduce_sum(e))
    return graph


def test_dense_variable(tf1_graph):
    info = _infos(tf1_graph)["dense/kernel"]
    assert info == VariableInfo(
        name="dense/kernel:0", op_name="dense/kernel", shape=(5, 7), dtype=np.dtype("float32"),
        byte_size=140, is_sparse=False, sparse_consumers=(), in_control_flow=False,
        is_resource=True, shape_fully_defined=True)


def test_gather_and_embedding_lookup_are_sparse(tf1_graph):
    infos = _infos(tf1_graph)
    ops = {op.name: op.type for op in tf1_graph.get_operations()}
    for name in ("table", "lookup"):
        info = infos[name]
        assert info.is_sparse and len(info.sparse_consumers) == 1
        assert ops[info.sparse_consumers[0]] == "ResourceGather"
    assert infos["lookup"].dtype == np.float64 and infos["lookup"].byte_size == 50 * 4 * 8


def test_ref_variable_gather_is_sparse(tf1_graph):
    info = _infos(tf1_graph)["ref"]
    assert not info.is_resource and info.is_sparse and info.dtype == np.float32
    assert {op.type for op in tf1_graph.get_operations() if op.name in info.sparse_consumers} \
        <= {"GatherV2", "Gather"}


def test_while_loop_consumer_is_control_flow(tf1_graph):
    infos = _infos(tf1_graph)
    assert infos["looped"].in_control_flow and not infos["looped"].is_sparse
    assert not any(infos[n].in_control_flow for n in ("dense/kernel", "table", "ref"))


def test_sparse_and_dense_reads_count_as_sparse(tf1_graph):
    assert _infos(tf1_graph)["both"].is_sparse  # documented: some read is sparse


def test_selection_keeps_the_requested_order_and_checks_names(tf1_graph):
    ugraph = from_tf_graph(tf1_graph)
    assert [i.op_name for i in variable_infos(ugraph, ["ref", "table"])] == ["ref", "table"]
    with pytest.raises(ValueError, match="no op named 'nope'"):
        variable_infos(ugraph, ["nope"])
    with pytest.raises(ValueError, match="op 'dense/kernel/Read/ReadVariableOp' is a ReadVariableOp"):
        variable_infos(ugraph, ["dense/kernel/Read/ReadVariableOp"])


def test_default_order_is_topological(tf1_graph):
    ugraph = from_tf_graph(tf1_graph)
    names = [i.op_name for i in variable_infos(ugraph)]
    assert sorted(names) == ["both", "dense/kernel", "lookup", "looped", "ref", "table"]
    assert names == [n for n in ugraph.topo_order if n in names]


def test_keras3_layers(tf):
    import keras
    graph = tf.Graph()
    with graph.as_default():
        ids = tf.compat.v1.placeholder(tf.int32, [None, 3])
        seq = keras.layers.Embedding(40, 6, name="emb")(ids)
        out = keras.layers.Dense(2, name="head")(keras.layers.LSTM(4, name="rnn")(seq))
        assert out is not None
    infos = _infos(graph)
    emb = infos["emb/embeddings"]
    assert emb.is_sparse and emb.shape == (40, 6) and not emb.in_control_flow
    rnn = [i for n, i in infos.items() if n.startswith("rnn/")]
    assert len(rnn) == 3 and all(i.in_control_flow and not i.is_sparse for i in rnn)
    assert {i.shape for i in rnn} == {(6, 16), (4, 16), (16,)}
    head = infos["head/kernel"]
    assert head.shape == (4, 2) and not head.is_sparse and not head.in_control_flow


def test_a_tf_graph_read_in_place_says_what_its_ir_says(tf, tf1_graph):
    """graph_variable_infos walks the tf.Graph itself (no IR of the whole graph) and finds the same facts."""
    import keras
    keras_graph = tf.Graph()
    with keras_graph.as_default():
        ids = tf.compat.v1.placeholder(tf.int32, [None, 3])
        keras.layers.Dense(2)(keras.layers.LSTM(4)(keras.layers.Embedding(40, 6)(ids)))
    for graph in (tf1_graph, keras_graph):
        expected = variable_infos(from_tf_graph(graph))
        names = [info.op_name for info in expected]
        assert graph_variable_infos(graph, names) == expected
        assert graph_variable_infos(graph, names[::-1]) == expected[::-1], "the order asked for"


def test_a_tf_graph_read_in_place_checks_names(tf1_graph):
    with pytest.raises(ValueError, match="no op named 'nope'"):
        graph_variable_infos(tf1_graph, ["nope"])
    with pytest.raises(ValueError, match="op 'dense/kernel/Read/ReadVariableOp' is a ReadVariableOp"):
        graph_variable_infos(tf1_graph, ["dense/kernel/Read/ReadVariableOp"])


def _var(ugraph, name, op_type="VarHandleOp", shape=(2, 3), dtype="float32"):
    attr = {"dtype": GenericDType.from_name(dtype), "shape": GenericShape(shape)}
    out = TensorInfo(name + ":0", name, np.float32, [], ugraph)
    OperationInfo(name, [], [out], op_type, ugraph=ugraph, op_attr=attr)


def _op(ugraph, name, op_type, inputs, n_outputs=1):
    OperationInfo(name, [TensorInfo(i, i.rpartition(":")[0], None, None, ugraph) for i in inputs],
                  [TensorInfo("{}:{}".format(name, k), name, None, None, ugraph)
                   for k in range(n_outputs)], op_type, ugraph=ugraph)


def test_v1_enter_through_identity_and_reads_that_are_not_handles():
    ugraph = IRGraph([])
    _var(ugraph, "v", "VariableV2")
    _op(ugraph, "v/read", "Identity", ["v:0"])
    _op(ugraph, "enter", "Enter", ["v/read:0"])
    _var(ugraph, "h")
    _op(ugraph, "h/read", "ReadVariableOp", ["h:0"])
    _op(ugraph, "loop", "While", ["h/read:0"])  # the value, not the handle, goes in
    _op(ugraph, "g", "GatherV2", ["h:0", "h/read:0"])  # the handle as indices: not a read
    _op(ugraph, "rg", "ResourceGather", ["h/read:0"])
    topologic_order_graph(ugraph)
    infos = {i.op_name: i for i in variable_infos(ugraph)}
    assert infos["v"].in_control_flow and not infos["v"].is_resource
    assert not infos["h"].in_control_flow and not infos["h"].is_sparse


def test_unknown_dims_are_flagged_and_odd_dtypes():
    ugraph = IRGraph([])
    _var(ugraph, "partial", shape=(None, 4))
    _var(ugraph, "norank", shape=None)
    _var(ugraph, "half", shape=(8,), dtype="bfloat16")
    _var(ugraph, "text", shape=(3,), dtype="string")
    topologic_order_graph(ugraph)
    infos = {i.op_name: i for i in variable_infos(ugraph)}
    assert infos["partial"].shape == (None, 4) and not infos["partial"].shape_fully_defined
    assert infos["partial"].byte_size == 16  # unknown dims count as 1: a lower bound
    assert infos["norank"].shape is None and infos["norank"].byte_size == 4
    assert infos["half"].dtype is None and infos["half"].byte_size == 16
    assert infos["text"].dtype == np.dtype(object) and infos["text"].byte_size == 0


def test_variable_without_attrs_is_reported():
    ugraph = IRGraph([])
    _op(ugraph, "v", "VarHandleOp", [])
    topologic_order_graph(ugraph)
    with pytest.raises(ValueError, match="variable op 'v' lacks its 'dtype'/'shape' attrs"):
        variable_infos(ugraph)


def test_variable_info_is_frozen(tf1_graph):
    info = _infos(tf1_graph)["table"]
    with pytest.raises(AttributeError):
        info.byte_size = 0
