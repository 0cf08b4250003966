"""The accumulate pass and the half-gradients pass: what a micro-step runs, what an update synchronizes.

Structure of a two-node job's graphs (every node's, transformed without
servers), numbers on one device: k micro-steps of batch b then the update ==
one step of batch k*b. What a job moves: a micro-step runs no op that crosses
nodes (no collective, no accumulator push, no queue), and the update runs the
same cross-node ops as a step without accumulation, so the bytes per applied
update do not change.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel.accumulate import Accumulate
from autodist.kernel.analysis import ancestors
from autodist.plan.names import micro_step_name, replica_prefix
from kernel_harness import capture, device, make_strategy, tf1, transform_job

T0, T1 = device(0, 0), device(1, 0)
CROSS = ("Collective", "Accumulator", "Queue")   # op types that move data between nodes in a job's step
K = 4


def _model():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    w = tf1.get_variable("w", initializer=tf.ones([3, 1]))
    emb = tf1.get_variable("emb", initializer=tf.reshape(tf.range(8.0), [4, 2]))
    pred = tf.matmul(x, w) + tf.reduce_sum(tf.gather(emb, ids), axis=1, keepdims=True)
    loss = tf.reduce_mean(tf.square(pred - 1.0))
    return {"x": x, "ids": ids, "w": w, "emb": emb, "train": tf1.train.AdamOptimizer(0.1).minimize(loss)}


def _strategy(kind, steps):
    staleness = {"ps": 0, "stale": 2}.get(kind)
    ps = {"w": dict(device=T0, staleness=staleness), "emb": dict(device=T1, staleness=staleness)} \
        if staleness is not None else None
    ar = {"w": {}, "emb": {}} if kind == "ar" else None
    strategy = make_strategy([T0, T1], ps=ps, ar=ar)
    strategy.graph_config.accumulation_steps = steps if steps > 1 else 0
    return strategy


def _cross_ops(graph, roots):
    return sorted(op.type for op in ancestors([graph.get_operation_by_name(r) for r in roots])
                  if any(mark in op.type for mark in CROSS))


@pytest.mark.parametrize("kind", ["ps", "stale", "ar"])
def test_a_micro_step_crosses_no_node_and_an_update_moves_what_a_step_moves(kind):
    """Also with bounded staleness: its barrier counts applied updates, not micro-steps."""
    plain = transform_job(_model, _strategy(kind, 1), 2)
    accumulated = transform_job(_model, _strategy(kind, K), 2)
    for before, after in zip(plain, accumulated):
        train = after.original.train_op_names[0]
        assert after.micro_steps == {train: micro_step_name(train)} and after.accumulation_steps == K
        graph = after.item.graph
        prefix = replica_prefix(0)
        assert _cross_ops(graph, [prefix + micro_step_name(train)]) == []
        assert _cross_ops(graph, [prefix + train]) == _cross_ops(before.item.graph, [prefix + train]) != []


def test_k_micro_steps_of_b_rows_equal_one_step_of_k_times_b_rows():
    """Dense and IndexedSlices gradients (the embedding's rows, repeated ids kept apart), on one device."""
    rng = np.random.RandomState(0)
    xs, ids = rng.randn(K, 2, 3).astype(np.float32), rng.randint(0, 4, (K, 2))
    item, model = capture(_model)
    once = _run(item, model, [(xs.reshape(-1, 3), ids.reshape(-1))])
    result = Accumulate(K)(item)
    twin = result.details[model["train"].name]
    assert result.item is not item and item.grad_records[0].grad != result.item.grad_records[0].grad
    feeds = [(xs[i], ids[i]) for i in range(K)]
    accumulated = _run(result.item, model, feeds, twin=twin)
    for got, want in zip(accumulated, once):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _run(item, model, feeds, twin=None):
    graph = item.graph
    x, ids = (graph.get_tensor_by_name(model[k].name) for k in ("x", "ids"))
    with tf.compat.v1.Session(graph=graph) as session:
        session.run([graph.get_operation_by_name(v.initializer_name) for v in item.info.variables])
        for i, (bx, bids) in enumerate(feeds):
            op = twin if twin is not None and i < len(feeds) - 1 else model["train"].name
            session.run(op, {x: bx, ids: bids})
        with graph.as_default():
            reads = [tf.raw_ops.ReadVariableOp(resource=graph.get_tensor_by_name(model[k].name), dtype=tf.float32)
                     for k in ("w", "emb")]
        return session.run(reads)


def test_a_variable_updated_by_an_accumulated_and_an_every_step_train_op_is_refused():
    def build():
        w = tf1.get_variable("w", initializer=tf.ones([2]))
        first = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(w * w))
        return first, tf.group(first, name="every_step")   # a train op that also runs the first's update
    item, (first, second) = capture(build)
    item.extend_train_ops([second])
    item.mark_every_step([second])
    with pytest.raises(TransformError, match="accumulates gradients and by one that updates at every step"):
        Accumulate(2)(item)


def test_a_half_gradient_is_synchronized_in_half_precision():
    """Under mixed_float16 the kernel's gradient is float16: the collective moves half the bytes."""
    import keras

    def build():
        keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            layer = keras.layers.Dense(2, kernel_initializer="ones", name="half_dense")
            x = tf1.placeholder(tf.float32, [None, 3], name="x")
            loss = tf.reduce_mean(tf.cast(layer(x), tf.float32))
            variables = layer.trainable_variables
            optimizer = keras.optimizers.SGD(0.1)
            grads = tf.gradients(loss, [v.value for v in variables])
            return optimizer.apply_gradients(zip(grads, variables))
        finally:
            keras.mixed_precision.set_global_policy("float32")
    item, _ = capture(build)
    names = [r.target.split(":")[0] for r in item.grad_records]
    results = transform_job(build, make_strategy([T0, T1], ar={n: {} for n in names}), 2)
    graph = results[0].item.graph
    collectives = [op for op in graph.get_operations() if op.type.startswith("Collective") and "AllReduce" in op.name]
    assert collectives and {op.inputs[0].dtype for op in collectives} == {tf.float16}   # a gather, or a ring



def _remote_variables(graph, root, task):
    """The variables ``root`` reads on another node than ``task`` (each read moves bytes)."""
    return sorted({op.name for op in ancestors([graph.get_operation_by_name(root)])
                   if op.type == "VarHandleOp" and "/task:" in op.device and "/task:{}/".format(task) not in op.device})


@pytest.mark.parametrize("kind", ["ps", "stale"])
def test_the_jobs_plan_lets_a_micro_step_read_synchronous_dense_server_variables_on_its_own_node(kind):
    """``AutoDist(accumulation_steps=k)``'s plan (``with_accumulation``) gives every synchronous server variable
    with a dense gradient a local proxy, refreshed once per update: a micro-step reads no such weight from
    another node. A stale variable keeps reading its server (it sees the other workers' updates between its
    own), and so does a sparse one (a step gathers a few rows; a refreshed copy would move the whole table)."""
    from autodist.runtime.strategy_handoff import with_accumulation
    item, _ = capture(_model)
    plain = transform_job(_model, _strategy(kind, K), 2)
    planned = transform_job(_model, with_accumulation(_strategy(kind, 1), item, K), 2)
    remote = []
    for task, (before, after) in enumerate(zip(plain, planned)):
        micro = replica_prefix(0) + micro_step_name(after.original.train_op_names[0])
        remote.append((_remote_variables(before.item.graph, micro, task),
                       _remote_variables(after.item.graph, micro, task)))
    assert [before for before, _ in remote] == [["emb"], ["w"]]   # node 0 reads emb on node 1, node 1 w on node 0
    assert [after for _, after in remote] == ([["emb"], []] if kind == "ps" else [["emb"], ["w"]])
