"""autodist.graph_editor.reroute: every edit is checked by running the graph before and after."""
import pytest
import tensorflow as tf

import autodist.graph_editor as ge


@pytest.fixture
def pair():
    """a=1 -> A=a*10 ; b=2 -> B=b*100 ; out = A + B."""
    graph = tf.Graph()
    with graph.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.constant(2.0, name="b")
        big_a = tf.multiply(a, 10.0, name="A")
        big_b = tf.multiply(b, 100.0, name="B")
        out = tf.add(big_a, big_b, name="out")
    return graph, dict(a=a, b=b, A=big_a, B=big_b, out=out)


def test_swap_ts(pair, run):
    graph, t = pair
    assert run(graph, [t["A"], t["B"]]) == [10.0, 200.0]
    assert ge.swap_ts(t["a"], t["b"]) == 2
    assert run(graph, [t["A"], t["B"]]) == [20.0, 100.0]


def test_reroute_ts(pair, run):
    graph, t = pair
    assert ge.reroute_ts([t["a"]], [t["b"]]) == 1
    assert run(graph, [t["A"], t["B"], t["out"]]) == [10.0, 100.0, 110.0]
    assert t["b"].consumers() == []


def test_reroute_ts_respects_can_and_cannot_modify(pair, run):
    graph, t = pair
    with graph.as_default():
        extra = tf.multiply(t["b"], 1000.0, name="extra")
    assert ge.reroute_ts(t["a"], t["b"], can_modify=[t["B"].op]) == 1
    assert run(graph, [t["B"], extra]) == [100.0, 2000.0]
    assert ge.reroute_ts(t["a"], t["b"], cannot_modify=extra.op) == 0
    assert ge.reroute_ts(t["a"], t["b"]) == 1
    assert run(graph, extra) == 1000.0


def test_reroute_ts_simultaneous_chain(run):
    graph = tf.Graph()
    with graph.as_default():
        a, b, c = (tf.constant(v, name=n) for v, n in ((1.0, "a"), (2.0, "b"), (3.0, "c")))
        read_b = tf.identity(b, name="read_b")
        read_c = tf.identity(c, name="read_c")
    # consumers of b move to a, consumers of c move to b: not a -> b -> c chained.
    ge.reroute_ts([a, b], [b, c])
    assert run(graph, [read_b, read_c]) == [1.0, 2.0]


def test_reroute_ts_errors_name_the_tensors(pair):
    graph, t = pair
    with graph.as_default():
        ints = tf.constant(1, name="ints")
        vec = tf.constant([1.0, 2.0], name="vec")
    with pytest.raises(ValueError, match="1 tensors with 2"):
        ge.reroute_ts([t["a"]], [t["a"], t["b"]])
    with pytest.raises(ValueError, match="a:0.*ints:0.*dtypes"):
        ge.reroute_ts(t["a"], ints)
    with pytest.raises(ValueError, match="vec:0.*shapes"):
        ge.swap_ts(vec, t["b"])
    with pytest.raises(TypeError):
        ge.reroute_ts(t["a"].op, t["b"])


@pytest.fixture
def blocks():
    """x=3 -> F: f1 = x+1, f2 = f1*2 -> cf ;  y=5 -> G: g1 = y-1, g2 = g1*3 -> cg."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(3.0, name="x")
        y = tf.constant(5.0, name="y")
        with tf.name_scope("F"):
            f2 = tf.multiply(tf.add(x, 1.0, name="f1"), 2.0, name="f2")
        with tf.name_scope("G"):
            g2 = tf.multiply(tf.subtract(y, 1.0, name="g1"), 3.0, name="g2")
        cf = tf.identity(f2, name="cf")
        cg = tf.identity(g2, name="cg")
    f_view = ge.sgv_scope("F", graph).remap_inputs([0])
    g_view = ge.sgv_scope("G", graph).remap_inputs([0])
    return graph, f_view, g_view, dict(x=x, y=y, cf=cf, cg=cg)


def test_swap_inputs_updates_graph_and_views(blocks, run):
    graph, f_view, g_view, t = blocks
    assert run(graph, [t["cf"], t["cg"]]) == [8.0, 12.0]
    f_out, g_out = ge.swap_inputs(f_view, g_view)
    assert f_out is f_view and g_out is g_view
    assert list(f_view.inputs) == [t["y"]] and list(g_view.inputs) == [t["x"]]
    assert run(graph, [t["cf"], t["cg"]]) == [12.0, 6.0]


def test_reroute_inputs(blocks, run):
    graph, f_view, g_view, t = blocks
    ge.reroute_inputs(f_view, g_view)
    assert list(g_view.inputs) == [t["x"]] and list(f_view.inputs) == [t["x"]]
    assert run(graph, [t["cf"], t["cg"]]) == [8.0, 6.0]


def test_swap_and_reroute_outputs(blocks, run):
    graph, f_view, g_view, t = blocks
    ge.swap_outputs(f_view, g_view)
    assert run(graph, [t["cf"], t["cg"]]) == [12.0, 8.0]
    ge.reroute_outputs(f_view, g_view)
    assert run(graph, [t["cf"], t["cg"]]) == [8.0, 8.0]


def test_swap_ios(blocks, run):
    graph, f_view, g_view, t = blocks
    ge.swap_ios(f_view, g_view)
    # cf now reads G fed with x: (3-1)*3; cg reads F fed with y: (5+1)*2.
    assert run(graph, [t["cf"], t["cg"]]) == [6.0, 12.0]


def test_reroute_ios(blocks, run):
    graph, f_view, g_view, t = blocks
    ge.reroute_ios(f_view, g_view)
    assert run(graph, [t["cf"], t["cg"]]) == [8.0, 8.0]
    assert list(g_view.inputs) == [t["x"]]


def test_reroute_inputs_of_ops_and_passthroughs(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(2.0, name="x")
        y = tf.constant(7.0, name="y")
        sq = tf.square(x, name="sq")
        read_y = tf.identity(y, name="read_y")
    passthrough = ge.sgv(y)
    ge.reroute_inputs(passthrough, sq.op)
    assert run(graph, [sq, read_y]) == [49.0, 7.0]
    with pytest.raises(ValueError, match="cannot pair"):
        ge.reroute_inputs(ge.sgv([x, y]), sq.op)


def test_remove_and_add_control_inputs(run):
    graph = tf.Graph()
    with graph.as_default():
        counter = tf.compat.v1.get_variable("counter", initializer=0.0, use_resource=True)
        bump = counter.assign_add(1.0, read_value=False)
        with tf.control_dependencies([bump]):
            read = tf.raw_ops.ReadVariableOp(resource=counter.handle, dtype=tf.float32,
                                             name="read")
        nothing = tf.no_op(name="nothing")
    assert read.op.control_inputs == [bump]
    assert run(graph, read, init=True) == 1.0
    ge.remove_control_inputs(read.op, bump)
    assert read.op.control_inputs == []
    assert run(graph, read, init=True) == 0.0
    ge.add_control_inputs(read.op, [bump, nothing, bump])
    assert read.op.control_inputs == [bump, nothing]
    assert run(graph, read, init=True) == 1.0
    ge.remove_control_inputs(read.op, [nothing])
    assert read.op.control_inputs == [bump]
    with pytest.raises(ValueError, match="already"):
        ge.add_control_inputs(read.op, bump)
    with pytest.raises(ValueError, match="not a control input"):
        ge.remove_control_inputs(read.op, nothing)
    with pytest.raises(TypeError, match="tf.Operation"):
        ge.add_control_inputs(read, nothing)


def test_swap_inputs_retargets_passthroughs(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(2.0, name="x")
        y = tf.constant(7.0, name="y")
        sq = tf.square(x, name="sq")
        read_y = tf.identity(y, name="read_y")
    passthrough, square = ge.sgv(y), ge.sgv(sq.op)
    ge.swap_inputs(passthrough, square)
    # The square now reads y; what flowed through the passthrough view is now x.
    assert run(graph, [sq, read_y]) == [49.0, 2.0]
    assert list(passthrough.passthroughs) == [x] and list(passthrough.outputs) == [x]
    assert list(square.inputs) == [y]
