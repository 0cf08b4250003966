"""autodist.graph_editor.util: conversions, placeholders, control outputs."""
import pytest
import tensorflow as tf

from autodist.graph_editor import subgraph
from autodist.graph_editor import util


def test_make_list_of_op_accepts_op_list_graph_and_view(chain):
    graph, x, a, b, _ = chain
    assert util.make_list_of_op(a.op) == [a.op]
    assert util.make_list_of_op([a.op, b.op]) == [a.op, b.op]
    assert util.make_list_of_op(graph) == graph.get_operations()
    assert util.make_list_of_op(subgraph.SubGraphView([a.op, b.op])) == [a.op, b.op]
    assert util.make_list_of_op([a.op, x], ignore_ts=True) == [a.op]
    assert util.make_list_of_op([]) == []


def test_make_list_of_op_errors_name_the_culprit(chain):
    graph, _, a, b, _ = chain
    with pytest.raises(TypeError, match="f/b:0"):
        util.make_list_of_op([a.op, b])
    with pytest.raises(TypeError, match="allow_graph"):
        util.make_list_of_op(graph, allow_graph=False)
    with tf.Graph().as_default():
        other = tf.constant(1.0, name="other")
    with pytest.raises(ValueError, match="other"):
        util.make_list_of_op([a.op, other.op])


def test_make_list_of_t(chain):
    graph, x, a, _, _ = chain
    assert util.make_list_of_t(a) == [a]
    assert util.make_list_of_t([x, a.op], ignore_ops=True) == [x]
    assert util.make_list_of_t(graph) == util.get_tensors(graph)
    with pytest.raises(TypeError, match="f/a"):
        util.make_list_of_t([x, a.op])
    with pytest.raises(TypeError, match=".inputs or .outputs"):
        util.make_list_of_t(subgraph.SubGraphView([a.op]))


def test_get_tensors_lists_every_output(chain):
    graph = chain[0]
    ts = util.get_tensors(graph)
    assert len(ts) == sum(len(op.outputs) for op in graph.get_operations())
    with pytest.raises(TypeError):
        util.get_tensors([chain[1]])


def test_generating_and_consuming_ops(chain):
    _, x, a, b, _ = chain
    assert util.get_generating_ops([a, b]) == [a.op, b.op]
    consumers = util.get_consuming_ops([x, x, a])
    assert consumers == [a.op, b.op]


def test_control_outputs_index_and_update():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
        with tf.control_dependencies([a.op]):
            b = tf.constant(2.0, name="b")
        control_outputs = util.ControlOutputs(graph)
        assert control_outputs.get(a.op) == (b.op,)
        assert control_outputs.get(b.op) == ()
        assert control_outputs.graph is graph
        with tf.control_dependencies([a.op]):
            c = tf.constant(3.0, name="c")
    assert control_outputs.get(a.op) == (b.op,)
    control_outputs.update()
    assert control_outputs.get(a.op) == (b.op, c.op)
    assert set(control_outputs.get_all()) == {a.op}
    with pytest.raises(TypeError, match="tf.Graph"):
        util.ControlOutputs([a.op])


def test_placeholder_name_formats():
    graph = tf.Graph()
    with graph.as_default():
        with tf.name_scope("a"):
            split = tf.split(tf.zeros([4]), 2, name="b")
        ph = tf.compat.v1.placeholder(tf.float32, name="geph__q_0")
    assert util.placeholder_name(split[1]) == "a/geph__b_1"
    assert util.placeholder_name(split[0], scope="s") == "s/geph__b_0"
    assert util.placeholder_name(split[0], scope="") == "geph__b_0"
    assert util.placeholder_name(split[0], prefix="p") == "a/p__b_0"
    assert util.placeholder_name(ph) == "geph__q_0"
    assert util.placeholder_name() == "geph"
    assert util.placeholder_name(scope="x/y") == "x/y/geph"
    with pytest.raises(TypeError, match="a/b"):
        util.placeholder_name(split[0].op)


def test_make_placeholder_from_tensor_can_stand_for_it(chain, run):
    graph, _, a, _, _ = chain
    with graph.as_default():
        ph = util.make_placeholder_from_tensor(a, scope="detached")
        twice = ph * 2.0
    assert ph.op.name == "detached/geph__a_0"
    assert ph.dtype == a.dtype and ph.shape.as_list() == a.shape.as_list()
    assert run(graph, twice, {ph: 21.0}) == 42.0


def test_make_placeholder_from_dtype_and_shape(run):
    graph = tf.Graph()
    with graph.as_default():
        ph = util.make_placeholder_from_dtype_and_shape(tf.int32, [2], scope="in")
        total = tf.reduce_sum(ph)
    assert ph.op.name == "in/geph"
    assert ph.shape.as_list() == [2]
    assert run(graph, total, {ph: [3, 4]}) == 7


def test_clean_graph_context_ignores_the_callers_scopes():
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
        with tf.name_scope("outer"), tf.device("/cpu:0"), tf.control_dependencies([a.op]):
            with util.clean_graph_context(graph):
                b = tf.constant(2.0, name="b")
    assert b.op.name == "b"
    assert b.op.device == ""
    assert b.op.control_inputs == []


def test_tree_helpers_keep_structure(chain):
    _, x, a, b, _ = chain
    tree = {"k": [x, (a, b)], "s": {a}}
    assert util.flatten_tree(tree) == [x, a, b, a]
    names = util.transform_tree(tree, lambda t: t.name)
    assert names == {"k": ["x:0", ("f/a:0", "f/b:0")], "s": {"f/a:0"}}
    assert util.concatenate_unique([1, 2], [2, 3, 1, 4]) == [1, 2, 3, 4]
    assert not util.is_iterable("abc") and not util.is_iterable(x)


def test_list_view_is_read_only(chain):
    _, x, a, _, _ = chain
    view = util.ListView([x, a])
    assert len(view) == 2 and view[1] is a and list(view) == [x, a]
    assert view + [x] == [x, a, x] and [a] + view == [a, x, a]
    assert view == [x, a] and view.index(a) == 1
    assert not hasattr(view, "append")
    with pytest.raises(TypeError):
        view[0] = a  # pylint: disable=unsupported-assignment-operation


def test_find_corresponding(chain):
    graph, x, a, b, _ = chain
    other = tf.Graph()
    with other.as_default():
        with tf.name_scope("r/f"):
            a2 = tf.constant(0.0, name="a")
            b2 = tf.identity(a2, name="b")
    assert util.find_corresponding([a, b.op], other, dst_scope="r") == [a2, b2.op]
    with pytest.raises(ValueError, match="source scope"):
        util.find_corresponding_elem(x, other, src_scope="f")
    assert "update_ops" in util.get_predefined_collection_names()
