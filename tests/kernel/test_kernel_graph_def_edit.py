"""GraphDefEditor and Scratch: in-place GraphDef edits and ops spliced from a scratch tf.Graph, run."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import node_def_pb2

from autodist.errors import TransformError
from autodist.kernel.base import signature_resolver
from autodist.kernel.graph_def_edit import GraphDefEditor, op_of, tensor_name
from kernel_harness import tf1


@pytest.fixture
def source():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant([1.0, 2.0], name="a")
        b = tf.constant([10.0, 20.0], name="b")
        tf.add(a, b, name="c")
        tf.unique(tf.constant([3, 3, 5]), name="u")
        v = tf.Variable([0.0, 0.0], name="v")
        v.assign([7.0, 8.0], name="set_v", read_value=False)
        tf.no_op(name="marker")
    return graph


def _editor(graph, pass_name="test-pass"):
    return GraphDefEditor(graph.as_graph_def(), signature_resolver(graph), pass_name)


def _run(graph_def, fetches, init=True):
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        if init:
            sess.run("v/Assign")
        return sess.run(fetches)


def test_names():
    assert (op_of("x:1"), op_of("^x"), op_of("x")) == ("x", "x", "x")
    assert (tensor_name("x"), tensor_name("x:2")) == ("x:0", "x:2")


def test_the_editor_owns_a_copy(source):
    original = source.as_graph_def()
    before = original.SerializeToString(deterministic=True)
    editor = GraphDefEditor(original, signature_resolver(source), "p")
    editor.set_input("c", 1, "a:0")
    editor.disable("set_v", [])
    assert original.SerializeToString(deterministic=True) == before
    np.testing.assert_allclose(_run(editor.graph_def, "c:0"), [2.0, 4.0])


def test_spliced_ops_compute_on_the_real_tensors(source):
    editor = _editor(source)
    scratch = editor.scratch()
    with scratch.graph.as_default(), tf.name_scope("AutoDist-Test/"):
        total = tf.add_n([scratch.tensor("c"), scratch.tensor("a:0")], name="sum")
        # the second output of a two-output op, and a replica copy's name resolved by its origin
        count = tf.reduce_sum(scratch.tensor("u:1"), name="count")
        assert scratch.tensor("AutoDist-Replica-1/c:0").shape.as_list() == [2]
    names = scratch.commit()
    assert {total.op.name, count.op.name} <= set(names)
    nodes = {n.name: n for n in editor.graph_def.node}
    assert list(nodes["AutoDist-Test/sum"].input) == ["c:0", "a:0"]
    assert list(nodes["AutoDist-Test/count"].input)[0] == "u:1"
    assert not [n for n in nodes if n.startswith("AutoDist-Splice-")]   # stand-ins are not spliced
    got_sum, got_count = _run(editor.graph_def, ["AutoDist-Test/sum:0", "AutoDist-Test/count:0"])
    np.testing.assert_allclose(got_sum, [12.0, 24.0])
    assert got_count == 1   # unique([3, 3, 5]) indices: 0 + 0 + 1


def test_control_stand_ins_become_control_inputs(source):
    editor = _editor(source)
    scratch = editor.scratch()
    with scratch.graph.as_default():
        handle = scratch.tensor("v:0", dtype=tf.resource, shape=[])
        with tf.control_dependencies([scratch.control("set_v")]):
            tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32, name="AutoDist-Test/read")
    scratch.commit()
    node = {n.name: n for n in editor.graph_def.node}["AutoDist-Test/read"]
    assert list(node.input) == ["v:0", "^set_v"]
    np.testing.assert_allclose(_run(editor.graph_def, "AutoDist-Test/read:0"), [7.0, 8.0])


def test_colocation_with_a_stand_in_names_the_real_op(source):
    editor = _editor(source)
    scratch = editor.scratch()
    with scratch.graph.as_default():
        a = scratch.tensor("a")
        with tf1.colocate_with(a):
            tf.identity(a, name="AutoDist-Test/near_a")
    scratch.commit()
    node = {n.name: n for n in editor.graph_def.node}["AutoDist-Test/near_a"]
    assert list(node.attr["_class"].list.s) == [b"loc:@a"]
    np.testing.assert_allclose(_run(editor.graph_def, "AutoDist-Test/near_a:0"), [1.0, 2.0])


def test_spliced_tensors_are_known_to_later_scratch_graphs(source):
    editor = GraphDefEditor(source.as_graph_def(), lambda name: signature_resolver(source)(name)
                            if not name.startswith("AutoDist-") else None, "p")
    first = editor.scratch()
    with first.graph.as_default():
        tf.cast(first.tensor("a"), tf.int32, name="AutoDist-Test/ints")
    first.commit()
    assert editor.signature("AutoDist-Test/ints:0")[0] == tf.int32
    second = editor.scratch()
    with second.graph.as_default():
        tf.identity(second.tensor("AutoDist-Test/ints") * 2, name="AutoDist-Test/twice")
    second.commit()
    np.testing.assert_array_equal(_run(editor.graph_def, "AutoDist-Test/twice:0"), [2, 4])


def test_names_taken_by_earlier_splices_are_not_reused(source):
    editor = _editor(source)
    made = []
    for _ in range(2):
        scratch = editor.scratch()
        with scratch.graph.as_default():
            made.append(tf.identity(scratch.tensor("a"), name="AutoDist-Test/same").op.name)
        scratch.commit()
    assert made == ["AutoDist-Test/same", "AutoDist-Test/same_1"]


def test_ops_built_outside_an_autodist_scope_get_fresh_names(source):
    editor = _editor(source)
    scratch = editor.scratch()
    with scratch.graph.as_default():
        # reduce_sum makes its axis constant as "Const", which the source graph already has
        total = tf.reduce_sum(scratch.tensor("c"), name="AutoDist-Test/total")
    scratch.commit()
    assert _run(editor.graph_def, total.name) == 33.0
    assert editor.node("Const").op == "Const"


def test_a_spliced_op_colliding_with_an_existing_one_is_refused(source):
    editor = _editor(source, "my-pass")
    node = node_def_pb2.NodeDef(name="c", op="NoOp")
    with pytest.raises(TransformError) as error:
        editor.append([node], {})
    assert (error.value.pass_name, error.value.op) == ("my-pass", "c")


def test_unknown_signatures_and_ops_name_the_pass_and_op(source):
    editor = _editor(source, "my-pass")
    with pytest.raises(TransformError) as error:
        editor.scratch().tensor("nowhere:0")
    assert (error.value.pass_name, error.value.op) == ("my-pass", "nowhere")
    with pytest.raises(TransformError) as error:
        editor.node("nowhere")
    assert (error.value.pass_name, error.value.op) == ("my-pass", "nowhere")


def test_disable_turns_a_write_into_a_noop_waiting_for_others(source):
    editor = _editor(source)
    editor.add_control_inputs("set_v", ["a"])
    editor.node("set_v").device = "/device:CPU:0"
    editor.disable("set_v", ["marker"])
    node = editor.node("set_v")
    assert node.op == "NoOp" and node.device == "/device:CPU:0"
    assert list(node.input) == ["^a", "^marker"]
    graph_def = editor.graph_def
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        sess.run("v/Assign")
        sess.run("set_v")
        np.testing.assert_allclose(sess.run("v/Read/ReadVariableOp:0"), [0.0, 0.0])


def test_set_input_and_control_inputs(source):
    editor = _editor(source, "my-pass")
    editor.set_input("c", 0, "b:0")
    np.testing.assert_allclose(_run(editor.graph_def, "c:0"), [20.0, 40.0])
    editor.add_control_inputs("c", ["marker", "marker", "c"])
    assert list(editor.node("c").input) == ["b:0", "b", "^marker"]
    for index in (2, 5):   # a control input, out of range
        with pytest.raises(TransformError) as error:
            editor.set_input("c", index, "a:0")
        assert (error.value.pass_name, error.value.op) == ("my-pass", "c")
