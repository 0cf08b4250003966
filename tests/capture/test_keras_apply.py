"""autodist.capture.keras_apply: a Keras 3 optimizer's update built straight-line, in Keras' order, on one device.

Each captured graph is run in a plain session (the capture alone, no
distribution) and compared with eager Keras on the same gradients: the
numbers are the oracle, the structure is checked where it explains why.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist.capture.graph_item import GraphItem
from autodist.capture.keras_apply import guard_writes, order_after_earlier_reads, straight_line_conds
from autodist.capture.optimizers import capture_optimizers
from autodist.capture.queries import ops_since
from autodist.errors import CaptureError

GRADS = [np.array([[0.5], [-1.0], [2.0]], np.float32), np.array([[1.0], [1.0], [-0.5]], np.float32),
         np.array([[np.inf], [0.0], [1.0]], np.float32), np.array([[0.1], [0.2], [0.3]], np.float32)]


def _eager(make, grads=GRADS):
    """The weights after each of ``grads`` applied by ``make()`` eagerly, and the optimizer."""
    w = keras.Variable(np.ones((3, 1), np.float32))
    optimizer = make()
    after = []
    for g in grads:
        optimizer.apply([tf.constant(g)], [w])
        after.append(w.numpy().copy())
    return after, optimizer


def _captured(make, grads=GRADS):
    """The same, with the update captured into a graph (fed the gradient) and run in a session."""
    graph = tf.Graph()
    item = GraphItem(graph)
    with graph.as_default():
        w = keras.Variable(np.ones((3, 1), np.float32))
        g = tf.compat.v1.placeholder(tf.float32, [3, 1])
        with capture_optimizers(), item.as_default():
            optimizer = make()
            train = optimizer.apply_gradients([(g, w)])
        after = []
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for value in grads:
                session.run(train, {g: value})
                after.append(session.run(w.value))
    return after, item


@pytest.mark.parametrize("make", [
    lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=4.0,
                                                dynamic_growth_steps=2),
    lambda: keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=2),
    lambda: keras.optimizers.AdamW(0.1, weight_decay=0.5),
    lambda: keras.optimizers.SGD(keras.optimizers.schedules.CosineDecay(0.1, 10, warmup_target=0.2,
                                                                        warmup_steps=2)),
], ids=["loss-scale", "ema-overwrite", "adamw", "warmup-schedule"])
def test_a_captured_update_equals_eager_keras(make):
    """Loss scaling skips the non-finite step and halves its scale; the EMA overwrite happens every other
    update; AdamW decays before its update (all Keras conds, built without control flow)."""
    grads = GRADS if "LossScale" in repr(make()) else [g for g in GRADS if np.isfinite(g).all()]
    expected, _ = _eager(make, grads)
    got, item = _captured(make, grads)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert not [op for op in item.graph.get_operations() if op.type in ("If", "StatelessIf")]


def test_a_cond_builds_both_branches_and_guards_their_writes():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.Variable(1.0)
        w = tf.Variable(10.0)
        pred = tf.compat.v1.placeholder(tf.bool, [])
        with straight_line_conds(graph) as guards:
            from keras.src import ops
            result = ops.cond(pred, lambda: (v.assign_add(1.0), tf.constant(1.0))[1],
                              lambda: (w.assign(5.0), tf.constant(2.0))[1])
        guard_writes(graph, guards)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            writes = [op for op in graph.get_operations() if op.type in ("AssignAddVariableOp", "AssignVariableOp")
                      and op in guards.of_op]
            assert session.run([result] + writes, {pred: True})[0] == 1.0
            assert session.run([v, w]) == [2.0, 10.0]
            assert session.run([result] + writes, {pred: False})[0] == 2.0
            assert session.run([v, w]) == [2.0, 5.0]


def test_a_write_the_guard_cannot_make_conditional_is_refused():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.Variable(tf.ones([2]), use_resource=True)
        pred = tf.compat.v1.placeholder(tf.bool, [])
        with straight_line_conds(graph) as guards:
            from keras.src import ops
            ops.cond(pred, lambda: tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=0.1,
                                                                            delta=tf.ones([2])), lambda: None)
        with pytest.raises(CaptureError, match="ResourceApplyGradientDescent.*inside a keras.ops.cond"):
            guard_writes(graph, guards)


def test_writes_wait_for_the_reads_made_before_the_update():
    """AdamW's decay reads and writes the weight without reading the gradient: it waits for the forward read."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf.Variable(tf.ones([2]))
        forward = w.read_value()
        first = graph.version + 1
        decay = w.assign_sub(w * 0.1, read_value=False)
        new_ops = ops_since(graph, first)
        assert new_ops[-1] is decay and forward.op not in new_ops
        order_after_earlier_reads(new_ops)
        assert forward.op.inputs[0].op in decay.control_inputs   # the ReadVariableOp behind read_value()
        assert not [op for op in decay.control_inputs if op.name.startswith(w.op.name + "/")]


@pytest.mark.parametrize("make, match", [
    (lambda: keras.optimizers.ScheduleFreeAdamW(0.1), "ScheduleFreeAdamW is not supported"),
    (lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)),
     r"accumulation_steps=2\), and leave the inner optimizer's option unset"),
    (lambda: keras.optimizers.SGD(0.1, gradient_accumulation_steps=2, use_ema=True, ema_overwrite_frequency=3),
     "ema_overwrite_frequency"),
], ids=["schedule-free", "inner-accumulation", "accumulation-with-ema-overwrite"])
def test_what_cannot_be_exact_is_refused_by_name(make, match):
    with pytest.raises(CaptureError, match=match):
        _captured(make, GRADS[:1])


def test_keras_own_accumulation_becomes_the_kernels():
    """The captured apply is Keras' update step without Keras' accumulators; the calls in between count."""
    _, item = _captured(lambda: keras.optimizers.Adam(0.1, gradient_accumulation_steps=3), GRADS[:1])
    assert item.accumulation_steps == 3
    (train, micro), = item.micro_step_ops.items()
    assert train in item.train_op_names and micro
    assert not [v for v in item.graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
                if "gradient_accumulator" in v.name]
