"""analysis.analyze: creation / compute / apply parts, gradient entry points, slots, state ops, input pipeline."""
import keras
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.walks import resource_source
from kernel_harness import capture, tf1


def _adam_dense_and_sparse():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    w = tf1.get_variable("w", initializer=tf.ones([2, 1]))
    emb = tf1.get_variable("emb", initializer=tf.ones([5, 1]))
    loss = tf.reduce_mean(tf.matmul(x, w)) + tf.reduce_sum(tf.gather(emb, ids))
    return {"train": tf1.train.AdamOptimizer(0.1).minimize(loss), "loss": loss}


@pytest.fixture(scope="module")
def adam():
    item, built = capture(_adam_dense_and_sparse)
    return item, built, analyze(item)


def test_variables_facts_and_creation_part(adam):
    item, _, analysis = adam
    assert set(analysis.variables) == {"w", "emb", "beta1_power", "beta2_power",
                                       "w/Adam", "w/Adam_1", "emb/Adam", "emb/Adam_1"}
    w = analysis.variables["w"]
    assert (w.name, w.dtype, w.shape.as_list(), w.trainable) == ("w:0", tf.float32, [2, 1], True)
    assert w.initializer == "w/Assign" and w.snapshot == "w/Read/ReadVariableOp"
    assert {"w", "w/Assign", "w/IsInitialized/VarIsInitializedOp", "w/Read/ReadVariableOp"} <= w.creation_ops
    assert not analysis.variables["w/Adam"].trainable
    assert analysis.creation_ops == frozenset().union(*(v.creation_ops for v in analysis.variables.values()))
    # The forward pass is neither creation nor apply.
    assert "MatMul" not in analysis.creation_ops and "MatMul" not in analysis.apply_ops


def test_apply_part_is_what_the_optimizer_added(adam):
    item, built, analysis = adam
    assert analysis.train_ops == (built["train"].name,)
    assert "Adam/update_w/ResourceApplyAdam" in analysis.apply_ops
    assert "Adam/update_emb/ResourceScatterAdd" in analysis.apply_ops
    compute_and_creation = {op.name for op in item.graph.get_operations()
                            if op.name.startswith("gradients/")} | analysis.creation_ops
    assert not analysis.apply_ops & compute_and_creation


def test_gradient_entry_points_point_at_the_gradient(adam):
    item, _, analysis = adam
    graph = item.graph
    assert analysis.sparse == {"w": False, "emb": True}
    assert set(analysis.grad_tensors["w"]) == {"dense"}
    assert {"values", "indices"} <= set(analysis.grad_tensors["emb"])
    assert [(g.consumer, g.index, g.component) for g in analysis.grad_inputs["w"]] == [
        ("Adam/update_w/ResourceApplyAdam", 9, "dense")]
    for var_op, entries in analysis.grad_inputs.items():
        assert {e.component for e in entries} >= ({"dense"} if var_op == "w" else {"values", "indices"})
        for entry in entries:
            consumer = graph.get_operation_by_name(entry.consumer)
            assert consumer.name in analysis.apply_ops
            assert consumer.inputs[entry.index].name == analysis.grad_tensors[var_op][entry.component]


def test_slots_are_the_variables_the_gradient_updates_but_not_shared_optimizer_state(adam):
    _, _, analysis = adam
    assert analysis.slots == {"w": ("w/Adam", "w/Adam_1"), "emb": ("emb/Adam", "emb/Adam_1")}
    assert analysis.writes["Adam/update_w/ResourceApplyAdam"] == "w"
    # Adam's beta powers are written by the apply part but belong to no variable.
    written = set(analysis.writes.values())
    assert {"beta1_power", "beta2_power"} <= written
    assert not {"beta1_power", "beta2_power"} & {s for slots in analysis.slots.values() for s in slots}


def test_state_ops_touch_only_their_variable_and_slots(adam):
    item, _, analysis = adam
    graph = item.graph
    assert analysis.state_ops["w"] == frozenset({"Adam/update_w/ResourceApplyAdam"})
    emb_state = analysis.state_ops["emb"]
    assert {"Adam/update_emb/ResourceScatterAdd", "Adam/update_emb/AssignSubVariableOp"} <= emb_state
    assert emb_state <= analysis.apply_ops
    owned = {"emb", "emb/Adam", "emb/Adam_1", "w", "w/Adam", "w/Adam_1"}
    for name in emb_state | analysis.state_ops["w"]:
        op = graph.get_operation_by_name(name)
        resources = {resource_source(t).name for t in op.inputs if t.dtype == tf.resource}
        assert resources <= owned
        # closed under consumers: whatever uses a state op's output is a state op too
        for t in op.outputs:
            assert all(c.name in emb_state | analysis.state_ops["w"] for c in t.consumers())


def test_update_ops_are_recorded(adam):
    _, _, analysis = adam
    assert analysis.update_ops["w"] == "Adam/update_w/ResourceApplyAdam"
    assert analysis.update_ops["emb"] in analysis.apply_ops


def test_keras_optimizer_slots_and_iteration_counter():
    def build():
        x = tf1.placeholder(tf.float32, [None, 2], name="x")
        dense = keras.layers.Dense(1)
        loss = tf.reduce_mean(dense(x))
        variables = dense.trainable_weights
        grads = tf.gradients(loss, variables)
        return {"train": keras.optimizers.Adam(0.1).apply_gradients(zip(grads, variables))}
    item, _ = capture(build)
    analysis = analyze(item)
    kernel = [v for v in analysis.grad_tensors if v.endswith("kernel")][0]
    assert len(analysis.slots[kernel]) == 2
    assert all("kernel" in s for s in analysis.slots[kernel])
    counters = [v for v in analysis.variables if v.endswith("iteration")]
    assert counters and counters[0] in analysis.writes.values()
    assert not any(counters[0] in slots for slots in analysis.slots.values())


def test_input_pipeline_is_the_iterator_and_its_dataset_not_get_next():
    def build():
        data = tf.data.Dataset.from_tensor_slices(tf.ones([8, 2])).batch(2)
        iterator = tf1.data.make_one_shot_iterator(data)
        x = iterator.get_next()
        w = tf1.get_variable("w", initializer=tf.ones([2, 1]))
        return {"train": tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(x, w))),
                "x": x}
    item, built = capture(build)
    analysis = analyze(item)
    types = {item.graph.get_operation_by_name(n).type for n in analysis.input_pipeline}
    assert "OneShotIterator" in types
    assert built["x"].op.name not in analysis.input_pipeline
    assert not analysis.input_pipeline & analysis.creation_ops
    assert not analysis.input_pipeline & analysis.apply_ops


def test_no_input_pipeline_without_iterators(adam):
    assert adam[2].input_pipeline == frozenset()


def test_a_gradient_of_an_unknown_variable_names_the_variable():
    item, _ = capture(_adam_dense_and_sparse)
    item.info.pop_variable("w")
    with pytest.raises(TransformError) as error:
        analyze(item)
    assert error.value.pass_name == "analysis" and error.value.variable == "w"
    assert "prepare()" in str(error.value)


def test_analysis_leaves_the_graph_alone():
    item, _ = capture(_adam_dense_and_sparse)
    before = item.graph.as_graph_def().SerializeToString(deterministic=True)
    version = item.graph.version
    analyze(item)
    assert item.graph.version == version
    assert item.graph.as_graph_def().SerializeToString(deterministic=True) == before
