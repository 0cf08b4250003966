"""Parameter-server synchronization: placement, local reduction, sync / async, proxies, sparse gradients.

Numbers come from running the transformed graphs on in-process servers
(``conftest.cluster``): one node with two CPU replicas, or two nodes (two
replicas on the chief, one on the other) driven from two threads.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from kernel_harness import (capture, device, make_strategy, nodes_by_name, parallel, reference_run,
                            tf1, transform, transform_job)

T0C0, T0C1, T1C0 = device(0, 0), device(0, 1), device(1, 0)
LR = 0.1


def _model():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w = tf1.get_variable("w", initializer=tf.constant([[0.5], [-0.5]]))
    b = tf1.get_variable("b", initializer=tf.constant([0.1]))
    emb = tf1.get_variable("emb", initializer=tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(6, 1)))
    prediction = tf.matmul(x, w) + b + tf.gather(emb, ids)
    per_example = tf.square(prediction - y)[:, 0]
    loss = tf.reduce_mean(per_example, name="loss")
    train = tf1.train.GradientDescentOptimizer(LR).minimize(loss)
    return {"train": train, "loss": loss}


def _batch(step, rows=6):
    rs = np.random.RandomState(10 + step)
    return {"x:0": rs.rand(rows, 2).astype(np.float32),
            "ids:0": np.array([3, 1, 3, 5, 3, 0][:rows], np.int32),   # row 3 in every replica's share
            "y:0": rs.rand(rows, 1).astype(np.float32)}


def _single_node_strategy(**ps_args):
    return make_strategy([T0C0, T0C1], ps={"w": dict(device=T0C0, **ps_args), "b": dict(device=T0C1, **ps_args),
                                           "emb": dict(device=T0C0, **ps_args)})


def _two_node_strategy(proxy_w=False, **ps_args):
    return make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0, proxy=proxy_w, **ps_args),
                                                 "b": dict(device=T1C0, **ps_args),
                                                 "emb": dict(device=T0C0, **ps_args)})


def _reference(steps, rows=6):
    return reference_run(_model, [_batch(s, rows) for s in range(steps)],
                         ["w/Read/ReadVariableOp:0", "b/Read/ReadVariableOp:0", "emb/Read/ReadVariableOp:0"])


def _ancestors(nodes, name):
    seen, stack = set(), [name.lstrip("^").split(":")[0]]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(i.lstrip("^").split(":")[0] for i in nodes[op].input)
    return seen


@pytest.fixture(scope="module")
def one_node_result():
    item, _ = capture(_model)
    return transform(item, _single_node_strategy())


def test_variable_and_update_live_on_the_server(one_node_result):
    nodes = nodes_by_name(one_node_result.item.graph_def)
    assert nodes["w"].device == T0C0 and nodes["b"].device == T0C1
    assert nodes["w/Assign"].device == T0C0
    apply_w = nodes["AutoDist-Replica-0/GradientDescent/update_w/ResourceApplyGradientDescent"]
    apply_b = nodes["AutoDist-Replica-0/GradientDescent/update_b/ResourceApplyGradientDescent"]
    assert (apply_w.device, apply_b.device) == (T0C0, T0C1)
    # one replica applies the node's update; the other's write waits for it instead of running
    assert nodes["AutoDist-Replica-1/GradientDescent/update_w/ResourceApplyGradientDescent"].op == "NoOp"


def test_local_replica_gradients_are_reduced_on_the_node_first(one_node_result):
    nodes = nodes_by_name(one_node_result.item.graph_def)
    local = nodes["AutoDist-PS/w/local_sum"]
    assert local.op == "AddN" and local.device == T0C0
    grad = one_node_result.assignment.analysis.grad_tensors["w"]["dense"]
    assert sorted(local.input) == ["AutoDist-Replica-0/" + grad, "AutoDist-Replica-1/" + grad]
    apply_w = nodes["AutoDist-Replica-0/GradientDescent/update_w/ResourceApplyGradientDescent"]
    assert apply_w.input[2].startswith("AutoDist-PS/w/")          # the node's mean, not replica 0's gradient


def test_sparse_gradients_are_aggregated_as_indexed_slices(one_node_result):
    nodes = nodes_by_name(one_node_result.item.graph_def)
    values, indices = nodes["AutoDist-PS/emb/local_values"], nodes["AutoDist-PS/emb/local_indices"]
    assert values.op == indices.op == "ConcatV2"
    parts = one_node_result.assignment.analysis.grad_tensors["emb"]
    assert list(values.input[:2]) == ["AutoDist-Replica-{}/{}".format(i, parts["values"]) for i in range(2)]
    # replica 0's sparse update consumes the node's rows, as slices (never densified)
    entries = one_node_result.assignment.analysis.grad_inputs["emb"]
    for entry in entries:
        feed = nodes["AutoDist-Replica-0/" + entry.consumer].input[entry.index]
        local = "AutoDist-PS/emb/local_" + entry.component
        assert local in _ancestors(nodes, feed), (entry, feed)
        assert not any(a.startswith("AutoDist-Replica-") for a in _ancestors(nodes, feed) - _ancestors(nodes, local))
    assert not any(n.op in ("UnsortedSegmentSum", "ScatterNd") and n.name.startswith("AutoDist-PS/")
                   for n in nodes.values())


def test_one_node_trains_like_one_device_on_the_global_batch(one_node_result, cluster):
    node = cluster(1).open(one_node_result)
    grad = one_node_result.assignment.analysis.grad_tensors["w"]["dense"]
    for step in range(3):
        local, g0, g1 = node.train_global(_batch(step), ["AutoDist-PS/w/local_sum:0", "AutoDist-Replica-0/" + grad,
                                                         "AutoDist-Replica-1/" + grad])
        np.testing.assert_allclose(local, g0 + g1, rtol=1e-6)
        assert not np.allclose(g0, g1)
    want = _reference(3)[-1]
    for name, value in zip(["w", "b", "emb"], want):
        np.testing.assert_allclose(node.read(name), value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_sync_across_two_nodes_with_a_proxy_where_the_variable_is_remote(cluster):
    results = transform_job(_model, _two_node_strategy(proxy_w=True, sync=True), num_tasks=2)
    chief_nodes, other_nodes = (nodes_by_name(r.item.graph_def) for r in results)
    accumulators = {n.name: (n.op, n.device) for n in chief_nodes.values() if n.op.endswith("ConditionalAccumulator")}
    assert accumulators == {"AutoDist-PS/w/accumulator/acc": ("ResourceConditionalAccumulator", T0C0),
                            "AutoDist-PS/b/accumulator/acc": ("ResourceConditionalAccumulator", T1C0)}
    # emb's sparse entries reach the chief as they are: the other node's queue on emb's server
    queues = {n.name: (n.op, n.device) for n in chief_nodes.values() if n.op == "FIFOQueueV2"
              and n.name.startswith("AutoDist-PS/emb/")}
    assert queues == {"AutoDist-PS/emb/accumulator/queue_1": ("FIFOQueueV2", T0C0)}
    assert other_nodes["AutoDist-PS/emb/accumulator/push"].op == "QueueEnqueueV2"
    # only the chief applies synchronous updates; the other node waits for its token
    assert other_nodes["AutoDist-Replica-0/GradientDescent/update_w/ResourceApplyGradientDescent"].op == "NoOp"
    assert other_nodes["AutoDist-PS/waited"].op == "NoOp" and "AutoDist-PS/release" in chief_nodes
    # the other node reads its copy; the chief holds w and reads it directly (a copy would spare nothing)
    assert other_nodes["AutoDist-Proxy/w/proxy"].device == T1C0
    # the chief writes the other node's copy after its update and before the release; that node refreshes
    # nothing itself (its reads of the server would wait for the server node's next compute)
    proxies = {n.name: n for n in chief_nodes.values() if n.name.startswith("AutoDist-Proxy/")}
    assert sorted(proxies) == ["AutoDist-Proxy/w/proxy_of_task_1", "AutoDist-Proxy/w/refresh_read",
                               "AutoDist-Proxy/w/refresh_task_1"]
    written, own = proxies["AutoDist-Proxy/w/proxy_of_task_1"], other_nodes["AutoDist-Proxy/w/proxy"]
    assert written.attr["shared_name"].s == own.attr["shared_name"].s == b"AutoDist-Proxy/w/proxy"
    assert written.attr["container"].s == own.attr["container"].s and written.device == own.device == T1C0
    assert proxies["AutoDist-Proxy/w/refresh_task_1"].device == T1C0
    assert "AutoDist-Proxy/w/refresh_task_1" in _ancestors(chief_nodes, "AutoDist-PS/release_1")
    assert not any(n.startswith("AutoDist-Proxy/w/refresh") for n in other_nodes)
    chief_read = chief_nodes[chief_nodes["AutoDist-Replica-1/MatMul"].input[1].split(":")[0]]
    assert list(chief_read.input) == ["w"]
    other_read = other_nodes[other_nodes["AutoDist-Replica-0/MatMul"].input[1].split(":")[0]]
    assert list(other_read.input) == ["AutoDist-Proxy/w/proxy:0"] and other_read.device == T1C0

    chief, other = cluster(2).open_job(results)
    want = _reference(3)
    for step in range(3):
        batch = _batch(step)
        parallel([lambda: chief.train_global(batch), lambda: other.train_global(batch)])
        server_w = chief.read("w")
        np.testing.assert_allclose(server_w, want[step][0], rtol=1e-5, atol=1e-6)
        # the other node's proxy was refreshed after the step's update
        np.testing.assert_array_equal(other.read("AutoDist-Proxy/w/proxy"), server_w)
    np.testing.assert_allclose(other.read("b"), want[-1][1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other.read("emb"), want[-1][2], rtol=1e-5, atol=1e-6)

    # the forward pass reads the copy: a write to the server is not seen until the next refresh
    batch = _batch(3)
    feeds = other.replica_feeds({k: [other.rows(r, v) for r in other.assignment.local] for k, v in batch.items()})
    before = other.read("AutoDist-Proxy/w/proxy")
    chief.assign("w", np.array([[5.0], [5.0]], np.float32))
    stale = other.run("AutoDist-Replica-0/MatMul:0", feeds)
    np.testing.assert_allclose(stale, other.rows(other.assignment.local[0], batch["x:0"]) @ before, rtol=1e-6)
    parallel([lambda: chief.train_global(batch), lambda: other.train_global(batch)])
    server_w = chief.read("w")
    np.testing.assert_array_equal(other.read("AutoDist-Proxy/w/proxy"), server_w)
    fresh = other.run("AutoDist-Replica-0/MatMul:0", feeds)
    np.testing.assert_allclose(fresh, other.rows(other.assignment.local[0], batch["x:0"]) @ server_w, rtol=1e-6)


def test_small_dense_gradients_bound_for_one_server_are_pushed_together(cluster):
    """w and b (a few bytes each, both on the chief's server) travel as one packed vector through one
    accumulator (contract.fused_pushes); the chief splits the mean back; training equals one device's."""
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0, sync=True, proxy=True),
                                                     "b": dict(device=T0C0, sync=True),
                                                     "emb": dict(device=T0C0, sync=True)})
    results = transform_job(_model, strategy, num_tasks=2)
    chief_nodes, other_nodes = (nodes_by_name(r.item.graph_def) for r in results)
    for nodes in (chief_nodes, other_nodes):
        accumulators = {n.name for n in nodes.values() if n.op.endswith("ConditionalAccumulator")}
        assert accumulators == {"AutoDist-PS-Fused/0/acc"}, "no accumulator of its own for w or b"
        packed = nodes["AutoDist-PS-Fused/0/pack"]
        assert packed.op == "ConcatV2" and packed.device == (T1C0 if nodes is other_nodes else T0C0)
        assert "AutoDist-PS-Fused/0/pack:0" in nodes["AutoDist-PS-Fused/0/push"].input
    assert chief_nodes["AutoDist-PS-Fused/0/unpack"].op == "SplitV"
    assert "AutoDist-PS-Fused/0/unpack" not in other_nodes, "only the chief takes and applies"
    assert other_nodes["AutoDist-PS/emb/accumulator/push"].op == "QueueEnqueueV2", "sparse rows travel alone"

    chief, other = cluster(2).open_job(results)
    want = _reference(3)
    for step in range(3):
        batch = _batch(step)
        parallel([lambda: chief.train_global(batch), lambda: other.train_global(batch)])
        # SGD: the mean of three replicas' packed gradients vs one batch's, float32 sums in another order
        # (~1e-7 a step); a gradient of the wrong scale moves w by the learning rate's order, far past this
        np.testing.assert_allclose(chief.read("w"), want[step][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(chief.read("b"), want[step][1], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(other.read("AutoDist-Proxy/w/proxy"), chief.read("w"))
    np.testing.assert_allclose(other.read("emb"), want[-1][2], rtol=1e-5, atol=1e-6)   # the same, for the rows


def test_no_proxy_on_the_cpus_of_the_node_that_holds_the_variable(cluster):
    item, _ = capture(_model)
    result = transform(item, make_strategy([T0C0, T0C1], ps={"w": dict(device=T0C1, proxy=True),
                                                             "b": dict(device=T0C1), "emb": dict(device=T0C1)}))
    nodes = nodes_by_name(result.item.graph_def)
    assert not any(name.startswith("AutoDist-Proxy/") for name in nodes)
    matmul_read = nodes[nodes["AutoDist-Replica-0/MatMul"].input[1].split(":")[0]]
    assert list(matmul_read.input) == ["w"]
    node = cluster(1).open(result)
    for step in range(3):
        node.train_global(_batch(step))
    np.testing.assert_allclose(node.read("w"), _reference(3)[-1][0], rtol=1e-5, atol=1e-6)


def _constant_gradient_model():
    """loss = mean(x) . w: the gradient does not depend on w, so updates simply add up."""
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.zeros([2]))
    loss = tf.reduce_mean(tf.reduce_sum(x * w, axis=1))
    return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(loss)}


def test_async_nodes_apply_their_own_mean_without_waiting(cluster):
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0, sync=False)})
    results = transform_job(_constant_gradient_model, strategy, num_tasks=2)
    assert not any("Accumulator" in n.op or "tokens" in n.name for r in results for n in r.item.graph_def.node)
    chief, other = cluster(2).open_job(results)
    x = np.array([[1.0, 2.0], [3.0, 4.0], [10.0, 20.0]], np.float32)
    for _ in range(3):                     # the other node steps alone: nobody waits for the chief
        other.train_global({"x:0": x})
    np.testing.assert_allclose(chief.read("w"), -LR * 3 * x[2], rtol=1e-6)
    chief.train_global({"x:0": x})         # the chief applies the mean of its two replicas
    np.testing.assert_allclose(chief.read("w"), -LR * (3 * x[2] + x[:2].mean(0)), rtol=1e-6)


def test_async_training_converges(cluster):
    def model():
        x = tf1.placeholder(tf.float32, [None, 2], name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", initializer=tf.zeros([2, 1]))
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name="loss")
        return {"train": tf1.train.GradientDescentOptimizer(0.2).minimize(loss)}
    results = transform_job(model, make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T1C0, sync=False)}),
                            num_tasks=2)
    chief, other = cluster(2).open_job(results)
    rs = np.random.RandomState(0)
    x = rs.rand(30, 2).astype(np.float32)
    batch = {"x:0": x, "y:0": x @ np.array([[2.0], [-1.0]], np.float32)}
    loss = lambda: chief.run("AutoDist-Replica-0/loss:0", chief.replica_feeds({"x:0": x, "y:0": batch["y:0"]}))  # noqa
    before = loss()
    parallel([lambda n=n: [n.train_global(batch) for _ in range(40)] for n in (chief, other)])
    assert loss() < 0.05 * before


def test_sparse_ps_variable_with_a_root_level_initializer(cluster):
    def model():
        ids = tf1.placeholder(tf.int32, [None], name="ids")
        emb = tf1.get_variable("emb", initializer=tf.cast(tf.ones([4, 1], tf.int32), tf.float32))  # op "Cast"
        return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(tf.reduce_sum(tf.gather(emb, ids)))}
    item, _ = capture(model)
    node = cluster(1).open(transform(item, make_strategy([T0C0, T0C1], ps={"emb": dict(device=T0C0)})))
    node.train({"ids:0": [np.array([1], np.int32), np.array([1, 2], np.int32)]})
    np.testing.assert_allclose(node.read("emb")[:, 0], [1.0, 1.0 - LR, 1.0 - LR / 2, 1.0], rtol=1e-6)


def _keras_adam_model():
    """emb trained by Keras 3 Adam, which squares each entry of a sparse gradient before repeated ids add up."""
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    emb = tf1.get_variable("emb", initializer=tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(6, 1)))
    per_example = tf.square(tf.gather(emb, ids) - y)[:, 0]
    grad = tf.gradients(tf.reduce_mean(per_example), [emb])[0]
    return {"train": keras.optimizers.Adam(0.1).apply_gradients([(grad, emb)])}


def test_two_nodes_give_keras_adam_every_entry_of_a_repeated_id(cluster):
    """Id 3 is in every replica's rows. Merged into one entry per id (as an accumulator does), Adam's second
    moment would get (g1 + g2 + g3)**2 where one device's gets g1**2 + g2**2 + g3**2."""
    batches = [{k: v for k, v in _batch(step).items() if k != "x:0"} for step in range(3)]
    want = reference_run(_keras_adam_model, batches, ["emb/Read/ReadVariableOp:0"])
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"emb": dict(device=T1C0)})
    chief, other = cluster(2).open_job(transform_job(_keras_adam_model, strategy, num_tasks=2))
    for step, batch in enumerate(batches):
        parallel([lambda: chief.train_global(batch), lambda: other.train_global(batch)])
        np.testing.assert_allclose(other.read("emb"), want[step][0], rtol=1e-5, atol=1e-6, err_msg=str(step))
