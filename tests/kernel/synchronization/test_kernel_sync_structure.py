"""Between-graph synchronization: the staleness barrier, relayed all-reduce, and what a step waits for.

The multi-process proof of the staleness bound with a slow worker is
``tests/test_staleness.py``; here the barrier's ops, and its blocking, are
checked on two in-process nodes.
"""
import concurrent.futures
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.plan.names import INIT_LOCAL
from autodist.kernel.synchronization import staleness
from kernel_harness import (AR, capture, device, make_strategy, nodes_by_name, parallel, reference_run, tf1,
                            transform, transform_job)

T0C0, T0C1, T1C0 = device(0, 0), device(0, 1), device(1, 0)
LR = 0.1


def _model():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.zeros([2]))
    b = tf1.get_variable("b", initializer=tf.zeros([2]))
    loss = tf.reduce_sum(tf.reduce_mean(x, 0) * (w + b))
    return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(loss)}


def _stale(k, sync=True, **extra):
    ps = {"w": dict(device=T0C0, sync=sync, staleness=k), "b": dict(device=T1C0, sync=sync, staleness=k)}
    ps.update(extra)
    return make_strategy([T0C0, T0C1, T1C0], ps=ps)


def test_staleness_bound_of_a_job():
    results = transform_job(_model, _stale(3, b=dict(device=T1C0, sync=True, staleness=2)), num_tasks=2)
    assert staleness.staleness_of(results[0].assignment) == 2      # the strictest variable's
    assert staleness.staleness_of(transform_job(_model, _stale(0, sync=False), 2)[0].assignment) is None
    item, _ = capture(_model)
    one_node = transform(item, make_strategy([T0C0, T0C1], ps={"w": dict(device=T0C0, staleness=2),
                                                               "b": dict(device=T0C0, staleness=2)}))
    assert staleness.staleness_of(one_node.assignment) is None     # nobody to wait for


def test_barrier_queues_tokens_and_wiring():
    chief, other = transform_job(_model, _stale(2), num_tasks=2)
    job = chief.assignment.node.job_id
    for result, me, peer in ((chief, 0, 1), (other, 1, 0)):
        nodes = nodes_by_name(result.item.graph_def)
        queues = {n.attr["shared_name"].s.decode(): n.device for n in nodes.values() if n.op == "FIFOQueueV2"}
        # incoming tokens on this node's CPU, outgoing ones into the peer's queue on the peer's CPU
        assert queues == {"{}/stale/{}<-{}".format(job, me, peer): device(me, 0),
                          "{}/stale/{}<-{}".format(job, peer, me): device(peer, 0)}
        prefill = nodes["AutoDist-Staleness/prefill/prefill_{}".format(peer)]
        assert prefill.op == "QueueEnqueueManyV2"
        tokens = tf.make_ndarray(nodes[prefill.input[1].split(":")[0]].attr["value"].tensor)
        assert tokens.shape == (2,)                                 # s tokens to start with
        assert "^" + prefill.name.rsplit("/", 1)[0] + "/prefill" in nodes[INIT_LOCAL].input
        barrier = nodes["AutoDist-Staleness/barrier"]
        for replica in result.assignment.local:
            train = nodes[replica.prefix + "GradientDescent"]
            assert "^AutoDist-Staleness/barrier" in train.input
        # updates are asynchronous: no accumulator, each node applies its own
        assert not any("Accumulator" in n.op for n in nodes.values())
        assert nodes["AutoDist-Replica-0/GradientDescent/update_w/ResourceApplyGradientDescent"].op != "NoOp"
        assert barrier.op == "NoOp"


def test_a_node_blocks_once_it_is_s_steps_ahead(cluster):
    k = 2
    chief, other = cluster(2).open_job(transform_job(_model, _stale(k), num_tasks=2))
    x = np.ones([3, 2], np.float32)
    for _ in range(k):                                # k steps ahead of a node that has not started
        chief.train_global({"x:0": x})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(chief.train_global, {"x:0": x})
        time.sleep(1.0)
        assert not blocked.done()                     # step k+1 waits for the other node's first step
        other.train_global({"x:0": x})
        blocked.result(timeout=30)                    # ...and goes once it is done
    # asynchronous updates: each node applied its own steps (3 on the chief, 1 on the other)
    np.testing.assert_allclose(chief.read("w"), -LR * 4 * np.ones(2), rtol=1e-6)


def test_train_ops_wait_for_the_steps_synchronization():
    item, _ = capture(_model)
    result = transform(item, make_strategy([T0C0, T0C1], ps={"w": dict(device=T0C0)},
                                           ar={"b": dict(compressor=AR.HorovodCompressorEF)}))
    nodes = nodes_by_name(result.item.graph_def)
    residual_updates = [n.name for n in nodes.values()
                        if n.op == "AssignVariableOp" and "residual" in n.input[0] and n.name.startswith("AutoDist-")
                        and not n.name.endswith("_init")]
    assert len(residual_updates) == 2
    for replica in result.assignment.local:
        train = set(nodes[replica.prefix + "GradientDescent"].input)
        assert "^AutoDist-PS/applied" in train
        assert {"^" + n for n in residual_updates} <= train   # error feedback is part of every step


def test_replicas_that_do_not_apply_never_touch_the_servers_state():
    def model():
        ids = tf1.placeholder(tf.int32, [None], name="ids")
        emb = tf1.get_variable("emb", initializer=tf.ones([5, 2]))
        return {"train": tf1.train.AdamOptimizer(0.1).minimize(tf.reduce_sum(tf.gather(emb, ids)))}
    item, _ = capture(model)
    result = transform(item, make_strategy([T0C0, T0C1], ps={"emb": dict(device=T0C0)}))
    nodes = nodes_by_name(result.item.graph_def)
    state_ops = result.assignment.analysis.state_ops["emb"]
    assert len(state_ops) > 5
    for name in state_ops:
        assert nodes["AutoDist-Replica-1/" + name].op == "NoOp"
        assert nodes["AutoDist-Replica-0/" + name].op != "NoOp"
    # nothing of its optimizer update reads or writes the server's variable or slots
    for name in result.assignment.analysis.apply_ops:
        node = nodes["AutoDist-Replica-1/" + name]
        inputs = {i.lstrip("^").split(":")[0] for i in node.input if not i.startswith("^")}
        assert node.op == "NoOp" or not inputs & {"emb", "emb/Adam", "emb/Adam_1"}, name


def test_relay_all_reduce_when_a_job_mixes_servers_and_all_reduce_across_nodes(cluster):
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0)}, ar={"b": {}})
    results = transform_job(_model, strategy, num_tasks=2)
    for result in results:
        nodes = nodes_by_name(result.item.graph_def)
        assert not [n for n in nodes.values() if n.op == "CollectiveReduceV2"]   # training has no collectives
        relay_acc = [n for n in nodes.values() if n.name.startswith("AutoDist-Relay/")
                     and n.op.endswith("ConditionalAccumulator")]
        assert [n.device for n in relay_acc] == [T0C0]                      # on the chief
    chief, other = cluster(2).open_job(results)
    xs = [np.full([2, 2], float(r + 1), np.float32) for r in range(3)]
    for _ in range(2):
        parallel([lambda: chief.train({"x:0": xs[:2]}), lambda: other.train({"x:0": xs[2:]})])
    copies = ((chief, "AutoDist-Replica-0/"), (chief, "AutoDist-Replica-1/"), (other, "AutoDist-Replica-0/"))
    for node, prefix in copies:
        np.testing.assert_allclose(node.read(prefix + "b"), -LR * 2 * np.full(2, 2.0), rtol=1e-6)
    np.testing.assert_allclose(chief.read("w"), -LR * 2 * np.full(2, 2.0), rtol=1e-6)


def _sparse_model():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.zeros([2]))
    emb = tf1.get_variable("emb", initializer=tf.zeros([3, 2]))
    rows = tf.gather(emb, tf.constant([0, 2]))
    loss = tf.reduce_sum(tf.reduce_mean(x, 0) * (w + rows))
    return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(loss)}


def test_relay_of_a_sparse_gradient_keeps_each_replica_dense_shape(cluster):
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0)}, ar={"emb": {}})
    results = transform_job(_sparse_model, strategy, num_tasks=2)
    chief, other = cluster(2).open_job(results)
    xs = [np.full([2, 2], float(r + 1), np.float32) for r in range(3)]
    for _ in range(2):
        parallel([lambda: chief.train({"x:0": xs[:2]}), lambda: other.train({"x:0": xs[2:]})])
    expected = np.zeros([3, 2], np.float32)
    expected[[0, 2]] = -LR * 2 * 2.0         # two steps of the mean gradient (1 + 2 + 3) / 3
    copies = ((chief, "AutoDist-Replica-0/"), (chief, "AutoDist-Replica-1/"), (other, "AutoDist-Replica-0/"))
    for node, prefix in copies:
        np.testing.assert_allclose(node.read(prefix + "emb"), expected, rtol=1e-6)


def _keras_adam_sparse_model():
    """emb's rows 0 and 2 each looked up by every row; Keras 3 Adam squares each entry of the sparse gradient."""
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.zeros([2]))
    emb = tf1.get_variable("emb", initializer=tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)))
    rows = tf.gather(emb, tf.tile(tf.constant([0, 2]), tf.shape(x)[:1]))
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(tf.repeat(x, 2, axis=0) * (w + rows), axis=1) - 1.0))
    variables = [w, emb]
    return {"train": keras.optimizers.Adam(LR).apply_gradients(zip(tf.gradients(loss, variables), variables))}


def test_relay_gives_keras_adam_every_entry_of_a_repeated_id(cluster):
    """The relay gathers the nodes' entries (merged per id, Adam's second moment would differ from one device's)."""
    rs = np.random.RandomState(3)
    batches = [{"x:0": rs.rand(6, 2).astype(np.float32)} for _ in range(3)]
    want = reference_run(_keras_adam_sparse_model, batches, ["emb/Read/ReadVariableOp:0"])
    strategy = make_strategy([T0C0, T0C1, T1C0], ps={"w": dict(device=T0C0)}, ar={"emb": {}})
    chief, other = cluster(2).open_job(transform_job(_keras_adam_sparse_model, strategy, num_tasks=2))
    for batch in batches:
        parallel([lambda: chief.train_global(batch), lambda: other.train_global(batch)])
    copies = ((chief, "AutoDist-Replica-0/"), (chief, "AutoDist-Replica-1/"), (other, "AutoDist-Replica-0/"))
    for node, prefix in copies:
        np.testing.assert_allclose(node.read(prefix + "emb"), want[-1][0], rtol=1e-5, atol=1e-6, err_msg=prefix)


def test_relay_refuses_compression_naming_the_variable():
    strategy = make_strategy([T0C0, T1C0], ps={"w": dict(device=T0C0)},
                             ar={"b": dict(compressor=AR.HorovodCompressor)})
    with pytest.raises(TransformError) as error:
        transform_job(_model, strategy, num_tasks=2)
    assert (error.value.pass_name, error.value.variable) == ("sync_between_graph", "b")
    assert "compression" in str(error.value)
