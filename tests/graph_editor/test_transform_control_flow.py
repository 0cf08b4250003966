"""autodist.graph_editor.transform on control flow: TF2 functional ops and TF1 loops."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

import autodist.graph_editor as ge

PATHS = ["import", "per_op"]


def transformer_for(path):
    transformer = ge.Transformer()
    if path == "per_op":
        transformer.transform_op_handler = lambda info, op, new_inputs: ge.copy_op_handler(
            info, op, new_inputs)
    return transformer


def library_names(graph):
    return {fdef.signature.name for fdef in graph.as_graph_def().library.function}


@pytest.fixture
def functional():
    """While, If and a tf.function (itself calling If) on a placeholder x."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        _, doubled = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2.0),
                                   [tf.constant(0), x], name="loop")
        branch = tf.cond(x > 1.0, lambda: x * 10.0, lambda: x - 10.0, name="branch")

        @tf.function
        def shifted(value):
            return tf.cond(value > 0.0, lambda: value + 1.0, lambda: value - 1.0)

        called = shifted(x)
        total = tf.add_n([doubled, branch, called], name="total")
    return graph, x, total


@pytest.mark.parametrize("path", PATHS)
def test_functional_control_flow_to_another_graph(functional, path, run):
    graph, x, total = functional
    expected = run(graph, total, {x: 2.0})
    assert expected == 16.0 + 20.0 + 3.0
    dst = tf.Graph()
    _, info = transformer_for(path)(graph, dst, "replica")
    assert library_names(graph) <= library_names(dst)
    assert run(dst, info.transformed(total), {info.transformed(x): 2.0}) == expected
    assert run(dst, info.transformed(total), {info.transformed(x): -1.0}) == -8.0 - 11.0 - 2.0


def test_only_the_needed_functions_are_brought(functional):
    graph, x, total = functional
    dst = tf.Graph()
    ge.copy(ge.sgv_scope("loop", graph), dst)  # the While op is "loop" itself
    copied = library_names(dst)
    assert copied and all(name.startswith("loop_") for name in copied)
    assert copied < library_names(graph)


def test_copies_share_functions_within_a_graph(functional, run):
    graph, x, total = functional
    dst = tf.Graph()
    _, first = ge.copy(graph, dst, "r0")
    _, second = ge.copy(graph, dst, "r1")
    _, same = ge.copy(graph, graph, "r2")
    assert library_names(dst) == library_names(graph)
    feeds = {first.transformed(x): 2.0, second.transformed(x): -1.0}
    assert run(dst, [first.transformed(total), second.transformed(total)], feeds) == [
        39.0, -21.0]
    assert run(graph, same.transformed(total), {same.transformed(x): 2.0}) == 39.0


def test_gradient_of_a_copied_while_loop():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        _, y = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * s), [0, x])
    dst = tf.Graph()
    _, info = ge.copy(graph, dst, "c")
    with dst.as_default():
        (dy,) = tf.gradients(info.transformed(y), info.transformed(x))
        with tf.compat.v1.Session() as sess:
            # y = x ** 8, dy/dx = 8 x ** 7
            assert sess.run(dy, {info.transformed(x): 1.5}) == pytest.approx(8 * 1.5 ** 7)


@pytest.fixture
def tf1_loop():
    """A TF1 while_loop (Enter/Merge/Switch/NextIteration/Exit), built with v2 control flow off."""
    previous = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [], name="x")
            _, powered = tf.compat.v1.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s * 2.0),
                                                 [tf.constant(0), x], name="loop")
            out = tf.identity(powered, name="out")
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = previous
    assert "NextIteration" in {op.type for op in graph.get_operations()}
    return graph, x, out


@pytest.mark.parametrize("path", PATHS)
def test_tf1_loop_copies(tf1_loop, path, run):
    graph, x, out = tf1_loop
    dst = tf.Graph()
    _, info = transformer_for(path)(graph, dst, "")
    assert run(dst, info.transformed(out), {info.transformed(x): 1.5}) == 48.0
    _, again = transformer_for(path)(graph, graph, "")  # same graph: frames renamed
    frames = {op.get_attr("frame_name") for op in graph.get_operations() if op.type == "Enter"}
    assert len(frames) == 2
    assert run(graph, [out, again.transformed(out)], {x: 1.0, again.transformed(x): 2.0}) == [
        32.0, 64.0]


def test_graph_replace_through_a_tf1_loop(tf1_loop, run):
    graph, x, out = tf1_loop
    with graph.as_default():
        three = tf.constant(3.0, name="three")
    new_out = ge.graph_replace(out, {x: three})
    assert new_out is not out
    np.testing.assert_allclose(run(graph, [out, new_out], {x: 1.0}), [32.0, 96.0])
