"""autodist.graph_editor.edit: detach, connect, bypass, checked numerically."""
import pytest
import tensorflow as tf

import autodist.graph_editor as ge
from autodist.graph_editor import util


def test_detach_inputs(chain, run):
    graph, x, a, b, c = chain
    assert run(graph, c, {x: 1.0}) == -4.0
    view, placeholders = ge.detach_inputs(ge.sgv(b.op))
    (ph,) = placeholders
    assert ph.op.name == "f/geph__a_0" and ph.op.type == "Placeholder"
    assert list(view.inputs) == [ph]
    assert b.op.inputs[0] is ph
    assert run(graph, [a, c], {x: 1.0, ph: 10.0}) == [2.0, -100.0]


def test_detach_inputs_with_control_inputs(run):
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=0.0, use_resource=True)
        bump = v.assign_add(1.0, read_value=False)
        with tf.control_dependencies([bump]):
            read = tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=tf.float32, name="read")
    assert run(graph, read, init=True) == 1.0
    view, (ph,) = ge.detach_inputs(read.op, control_inputs=True)
    assert read.op.control_inputs == [] and read.op.inputs[0] is ph
    assert ph.dtype == tf.resource and list(view.inputs) == [ph]
    ge.reroute_ts(v.handle, ph)  # plug the variable back: the control edge stays cut
    assert run(graph, read, init=True) == 0.0


def test_detach_outputs(chain, run):
    graph, x, a, b, c = chain
    view, placeholders = ge.detach_outputs(ge.sgv(a.op, b.op))
    (ph,) = placeholders
    assert list(view.outputs) == [b]
    assert c.op.inputs[0] is ph and ph.op.name == "f/geph__b_0"
    assert run(graph, [b, c], {x: 1.0, ph: 10.0}) == [4.0, -10.0]


def test_detach_outputs_keeps_inside_consumers(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(1.0, name="x")
        a = tf.add(x, 1.0, name="a")
        b = tf.multiply(a, 2.0, name="b")
        outside = tf.negative(a, name="outside")
    view, (ph,) = ge.detach_outputs([a.op, b.op])
    assert list(view.outputs) == [a]
    assert b.op.inputs[0] is a and outside.op.inputs[0] is ph
    assert run(graph, [b, outside], {ph: 5.0}) == [4.0, -5.0]


def test_detach_control_outputs(run):
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=0.0, use_resource=True)
        with tf.name_scope("upd"):
            bump = v.assign_add(1.0, read_value=False)
        with tf.control_dependencies([bump]):
            read = tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=tf.float32, name="read")
    control_outputs = util.ControlOutputs(graph)
    assert control_outputs.get(bump) == (read.op,)
    assert run(graph, read, init=True) == 1.0
    ge.detach_control_outputs(ge.sgv_scope("upd", graph), control_outputs)
    assert read.op.control_inputs == []
    assert control_outputs.get(bump) == ()
    assert run(graph, read, init=True) == 0.0
    with pytest.raises(TypeError, match="ControlOutputs"):
        ge.detach_control_outputs(bump, None)


def test_detach_control_inputs_only_cuts_outside_edges(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(1.0, name="x")
        outside = tf.no_op(name="outside")
        with tf.control_dependencies([outside]):
            a = tf.identity(x, name="a")
        with tf.control_dependencies([a.op]):
            b = tf.negative(x, name="b")
    assert a.op.control_inputs == [outside] and b.op.control_inputs == [a.op]
    ge.detach_control_inputs([a.op, b.op])
    assert a.op.control_inputs == [] and b.op.control_inputs == [a.op]
    assert run(graph, [a, b]) == [1.0, -1.0]


def test_detach_both_ways(chain, run):
    graph, x, a, b, c = chain
    view, inputs, outputs = ge.detach(b.op, control_ios=util.ControlOutputs(graph))
    assert [t.op.type for t in inputs + outputs] == ["Placeholder", "Placeholder"]
    assert run(graph, [b, c], {inputs[0]: 3.0, outputs[0]: 100.0}) == [9.0, -100.0]
    assert list(view.inputs) == inputs


def test_connect(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(3.0, name="x")
        double = tf.multiply(x, 2.0, name="double")
        other = tf.constant(10.0, name="other")
        plus = tf.add(other, 1.0, name="plus")
    assert run(graph, plus) == 11.0
    source, target = ge.connect(double.op, ge.sgv(plus.op).remap_inputs([0]))
    assert list(target.inputs) == [double]
    assert run(graph, plus) == 7.0
    with pytest.raises(ValueError):
        ge.connect(double.op, ge.sgv(plus.op))  # 1 output for 2 inputs


def test_connect_disconnect_first(run):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(3.0, name="x")
        double = tf.multiply(x, 2.0, name="double")
        old_reader = tf.negative(double, name="old_reader")
        other = tf.constant(10.0, name="other")
        plus = tf.add(other, 1.0, name="plus")
    ge.connect(double.op, ge.sgv(plus.op).remap_inputs([0]), disconnect_first=True)
    placeholder = old_reader.op.inputs[0]
    assert placeholder.op.type == "Placeholder"
    assert run(graph, [plus, old_reader], {placeholder: 1.0}) == [7.0, -1.0]


def test_bypass(chain, run):
    graph, x, a, b, c = chain
    view, (ph,) = ge.bypass(b.op)
    # c now reads a directly; b hangs off a placeholder.
    assert run(graph, c, {x: 1.0}) == -2.0
    assert run(graph, b, {ph: 4.0}) == 16.0
    assert list(view.inputs) == [ph]


def test_bypass_needs_matching_inputs_and_outputs(chain, run):
    graph, x, _, b, c = chain
    with pytest.raises(ValueError, match="cannot pair 1 tensors with 0"):
        ge.bypass(ge.sgv(b.op).remap_outputs([]))
    assert run(graph, c, {x: 1.0}) == -4.0  # nothing changed