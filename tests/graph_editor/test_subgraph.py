"""autodist.graph_editor.subgraph: SubGraphView, make_view, make_view_from_scope."""
import copy as pycopy

import pytest
import tensorflow as tf

import autodist.graph_editor as ge
from autodist.graph_editor import subgraph


@pytest.fixture
def net():
    """x, y -> s=x+y -> {p=s*y, q=-s} ; r=q+1 outside; z passes by."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [], name="y")
        z = tf.compat.v1.placeholder(tf.float32, [], name="z")
        with tf.name_scope("body"):
            s = tf.add(x, y, name="s")
            p = tf.multiply(s, y, name="p")
            q = tf.negative(s, name="q")
        r = tf.add(q, 1.0, name="r")
    return graph, dict(x=x, y=y, z=z, s=s, p=p, q=q, r=r)


def body_view(net):
    graph, t = net
    return subgraph.SubGraphView([t["s"].op, t["p"].op, t["q"].op], [t["z"], t["x"]])


def test_view_structure(net):
    graph, t = net
    view = body_view(net)
    assert view.graph is graph
    assert list(view.ops) == [t["s"].op, t["p"].op, t["q"].op]
    # x is connected, so it is not a passthrough even if listed as one.
    assert list(view.passthroughs) == [t["z"]]
    assert list(view.inputs) == [t["x"], t["y"], t["z"]]
    assert list(view.outputs) == [t["p"], t["q"], t["z"]]
    assert view.connected_inputs == [t["x"], t["y"]]
    assert view.connected_outputs == [t["p"], t["q"]]
    assert view.is_passthrough(t["z"]) and not view.is_passthrough(t["x"])
    assert view.op(1) is t["p"].op
    assert view.find_op_by_name("body/q") is t["q"].op
    assert view.input_index(t["y"]) == 1 and view.output_index(t["z"]) == 2
    assert view.consumers() == [t["r"].op]
    assert "body/p" in str(view) and "3 ops" in repr(view)


def test_view_errors(net):
    _, t = net
    view = body_view(net)
    with pytest.raises(ValueError, match="body/nope"):
        view.find_op_by_name("body/nope")
    with pytest.raises(ValueError, match="r:0"):
        view.input_index(t["r"])
    with pytest.raises(ValueError, match="x:0"):
        view.output_index(t["x"])
    with pytest.raises(TypeError):
        subgraph.SubGraphView([t["x"]])
    with tf.Graph().as_default():
        alien = tf.constant(1.0)
    with pytest.raises(ValueError):
        subgraph.SubGraphView([t["s"].op], [alien])


def test_remap_inputs_outputs(net):
    _, t = net
    view = body_view(net)
    remapped = view.remap_inputs([2, t["x"]])
    assert list(remapped.inputs) == [t["z"], t["x"]]
    assert list(view.inputs) == [t["x"], t["y"], t["z"]]  # the original is untouched
    assert list(view.remap_outputs([1, 1, t["p"]]).outputs) == [t["q"], t["q"], t["p"]]
    both = view.remap([0], [2, 0])
    assert list(both.inputs) == [t["x"]] and list(both.outputs) == [t["z"], t["p"]]
    assert list(view.remap(new_output_indices=[0]).inputs) == list(view.inputs)
    with pytest.raises(ValueError, match="repeats"):
        view.remap_inputs([0, 0])
    with pytest.raises(ValueError, match="out of range"):
        view.remap_outputs([3])
    with pytest.raises(ValueError, match="out of range"):
        view.remap_inputs([-1])
    with pytest.raises(TypeError, match="str"):
        view.remap_inputs(["x"])
    with pytest.raises(ValueError, match="r:0"):
        view.remap_outputs([t["r"]])


def test_remap_defaults_unique_and_consumers(net):
    _, t = net
    view = body_view(net).remap([1], [1, 1, 0])
    reset = view.remap_default()
    assert list(reset.inputs) == list(body_view(net).inputs)
    assert list(reset.outputs) == list(body_view(net).outputs)
    half = view.remap_default(remove_input_map=False)
    assert list(half.inputs) == [t["y"]] and len(half.outputs) == 3
    assert list(view.remap_outputs_make_unique().outputs) == [t["q"], t["p"]]
    # q has one consumer (r); p and z have none.
    assert list(body_view(net).remap_outputs_to_consumers().outputs) == [t["q"]]


def test_remove_unused_ops(net):
    _, t = net
    view = subgraph.SubGraphView([t["s"].op, t["p"].op, t["q"].op]).remap_outputs([0])
    # Nothing left but the output p: only the ops computing p stay.
    trimmed = view.remap_inputs([]).remove_unused_ops()
    assert list(trimmed.ops) == [t["s"].op, t["p"].op]
    # Input x reaches every op.
    assert len(view.remap_inputs([0]).remove_unused_ops().ops) == 3
    assert list(view.ops) == [t["s"].op, t["p"].op, t["q"].op]


def test_views_are_values(net):
    view = body_view(net)
    same = view.copy()
    assert same is not view and list(same.inputs) == list(view.inputs)
    shallow = pycopy.copy(view)
    assert list(shallow.ops) == list(view.ops)
    with pytest.raises(AttributeError):
        view.inputs.append(None)
    with view as inside:
        assert inside is view
    assert view and not subgraph.SubGraphView()
    assert str(subgraph.SubGraphView()) == "SubGraphView: empty"


def test_view_does_not_change_the_numbers(net, run):
    graph, t = net
    feed = {t["x"]: 1.0, t["y"]: 2.0}
    before = run(graph, t["r"], feed)
    body_view(net).remap([0], [1]).remove_unused_ops()
    assert run(graph, t["r"], feed) == before == -2.0


def test_make_view(net):
    graph, t = net
    view = ge.sgv("^body/", graph=graph)
    assert [op.name for op in view.ops] == ["body/s", "body/p", "body/q"]
    assert ge.make_view(view) is view
    with_ts = ge.make_view(t["s"].op, "(?#ts)^z:0$", graph=graph)
    assert list(with_ts.passthroughs) == [t["z"]]
    assert list(ge.make_view(t["x"], t["z"]).passthroughs) == [t["x"], t["z"]]
    merged = ge.make_view(view, t["r"].op)
    assert len(merged.ops) == 4
    with pytest.raises(ValueError, match="another graph"):
        ge.make_view(view, graph=tf.Graph())
    with pytest.raises(ValueError, match="graph="):
        ge.make_view("^body/")
    with pytest.raises(TypeError):
        ge.make_view(3)


def test_make_view_from_scope(net):
    graph, t = net
    view = ge.sgv_scope("body", graph)
    assert list(view.ops) == [t["s"].op, t["p"].op, t["q"].op]
    assert list(view.inputs) == [t["x"], t["y"]]
    assert not ge.make_view_from_scope("absent", graph)
