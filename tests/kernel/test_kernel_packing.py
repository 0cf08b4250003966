"""packing: flatten-and-concatenate, split-and-reshape, reads and writes of many variables as NodeDefs, run."""
import numpy as np
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel import packing
from autodist.kernel.base import signature_resolver
from autodist.kernel.graph_def_edit import GraphDefEditor
from kernel_harness import tf1

VALUES = {"m": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float32(7.0),
          "v": np.array([8.0, 9.0], np.float32), "t": np.arange(8, dtype=np.float32).reshape(2, 2, 2) + 10}


@pytest.fixture
def graph():
    graph = tf.Graph()
    with graph.as_default():
        for name, value in VALUES.items():
            tf.constant(value, name=name)
            tf.Variable(tf.zeros_like(value), name="var_" + name)
    return graph


def _run(editor, fetches, init=()):
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(editor.graph_def, name="")
    with tf1.Session(graph=graph) as session:
        session.run(list(init))
        return session.run(fetches)


def _shapes():
    return [tf.TensorShape(np.shape(value)) for value in VALUES.values()]


def test_pack_then_unpack_gives_every_tensor_back(graph):
    editor = GraphDefEditor(graph.as_graph_def(), signature_resolver(graph), "test")
    names = [name + ":0" for name in VALUES]
    flat, made = packing.pack(editor, names, tf.float32, _shapes(), "bucket/", "")
    assert flat == "bucket/pack:0" and editor.signature(flat) == (tf.float32, tf.TensorShape([6 + 1 + 2 + 8]))
    assert "bucket/pack_in_2" not in made, "a vector is its own flat form"
    pieces, _ = packing.unpack(editor, flat, tf.float32, _shapes(), "bucket/", "")
    assert [editor.signature(p)[1] for p in pieces] == _shapes()
    got = _run(editor, [flat] + pieces)
    np.testing.assert_array_equal(got[0], np.concatenate([np.ravel(v) for v in VALUES.values()]))
    for piece, want in zip(got[1:], VALUES.values()):
        np.testing.assert_array_equal(piece, want)


def test_one_tensor_is_only_flattened(graph):
    editor = GraphDefEditor(graph.as_graph_def(), signature_resolver(graph), "test")
    flat, _ = packing.pack(editor, ["t:0"], tf.float32, [tf.TensorShape([2, 2, 2])], "one/", "")
    vector, made = packing.pack(editor, ["v:0"], tf.float32, [tf.TensorShape([2])], "vec/", "")
    assert vector == "v:0" and made == []
    (back,), _ = packing.unpack(editor, flat, tf.float32, [tf.TensorShape([2, 2, 2])], "one/", "")
    np.testing.assert_array_equal(_run(editor, back), VALUES["t"])


def test_reads_and_writes_of_many_variables(graph):
    editor = GraphDefEditor(graph.as_graph_def(), signature_resolver(graph), "test")
    handles = ["var_{}:0".format(name) for name in VALUES]
    written = packing.assign_variables(editor, handles, [name + ":0" for name in VALUES], tf.float32, "w/", "")
    values, _ = packing.read_variables(editor, handles, tf.float32, "r/", "")
    inits = ["var_{}/Assign".format(name) for name in VALUES]
    graph_out = tf.Graph()
    with graph_out.as_default():
        tf1.import_graph_def(editor.graph_def, name="")
    with tf1.Session(graph=graph_out) as session:
        session.run(inits)
        session.run(written)
        for got, want in zip(session.run(values), VALUES.values()):
            np.testing.assert_array_equal(got, want)


def test_a_name_taken_twice_is_refused(graph):
    editor = GraphDefEditor(graph.as_graph_def(), signature_resolver(graph), "test")
    packing.pack(editor, ["m:0", "t:0"], tf.float32, [tf.TensorShape([2, 3]), tf.TensorShape([2, 2, 2])], "b/", "")
    with pytest.raises(TransformError, match="collides"):
        packing.pack(editor, ["m:0", "t:0"], tf.float32, [tf.TensorShape([2, 3]), tf.TensorShape([2, 2, 2])],
                     "b/", "")
