"""The statistics pass: synchronized batch norm over every replica of the job, and per-replica statistics read as
their mean.

A BatchNormalization layer (momentum 0.5) trained one step on a global batch of 8 rows, each replica fed its
share: with ``synchronized=True`` every replica's moving mean and variance are one device's for the whole
batch, and so are the updated gamma and beta (the backward pass's sums are the job's too), among collectives
(one node of two replicas) and relayed through the chief (two nodes of two replicas with a parameter-server
variable). With ``synchronized=False`` each replica keeps its shard's statistics, and the mean-on-read tensor
of every replica is the mean of all four copies, two of them on the other node.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist.capture.batch_norm import synchronized_batch_norm
from autodist.capture.keras import collect_state_updates
from autodist.plan.names import mean_on_read_name
from kernel_harness import capture, device, make_strategy, parallel, tf1, transform, transform_job

X = (np.random.RandomState(4).rand(8, 3) * [1.0, 4.0, 0.5] + [0.0, 2.0, -1.0]).astype(np.float32)
X[:4] += 1.0   # the replicas' shards differ: their own statistics would not be the batch's
WEIGHTS = np.array([1.0, -2.0, 0.5], np.float32)
VARIABLES = ("gamma", "beta", "moving_mean", "moving_variance")


def _model(synchronized, server_variable=False):
    def build():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        layer = keras.layers.BatchNormalization(synchronized=synchronized, momentum=0.5, name="bn")
        with synchronized_batch_norm(), collect_state_updates() as updates:
            y = layer(x, training=True)
        weights = [layer.gamma, layer.beta]
        loss = tf.reduce_mean(tf.reduce_sum(y * WEIGHTS, axis=1) ** 2)
        if server_variable:   # a parameter-server variable across nodes: the statistics are relayed
            scale = keras.Variable(1.0, name="scale")
            loss = loss * scale
            weights.append(scale)
        grads = tf.gradients(loss, [w.value for w in weights])
        train = keras.optimizers.SGD(0.1).apply_gradients(zip(grads, weights))
        return {"train": train, "updates": [op.name for op in updates]}
    return build


def _reference():
    item, built = capture(_model(True))
    graph = item.graph
    with tf1.Session(graph=graph) as session:
        session.run(tf1.global_variables_initializer())
        session.run([built["train"]] + [graph.get_operation_by_name(n) for n in built["updates"]], {"x:0": X})
        return {name: session.run(graph.get_tensor_by_name("bn/{}/Read/ReadVariableOp:0".format(name)))
                for name in VARIABLES}


def _step(node, built):
    """One step of ``node`` on its replicas' rows of X, the state updates included."""
    share = len(X) // node.assignment.num_replicas
    feeds = {r.prefix + "x:0": X[r.global_index * share:(r.global_index + 1) * share] for r in node.assignment.local}
    ops = [r.prefix + op for r in node.assignment.local for op in list(node.assignment.analysis.train_ops) +
           built["updates"]]
    node.run(ops, feeds)


def _copies(node):
    """{(replica prefix, variable): value} of this node's copies (a parameter-server variable's one copy)."""
    return {(r.prefix, name): node.read(("" if node.assignment.is_shared("bn/" + name) else r.prefix) + "bn/" + name)
            for r in node.assignment.local for name in VARIABLES}


def test_synchronized_statistics_are_the_whole_batchs_on_every_replica(cluster):
    item, built = capture(_model(True))
    replicas = [device(0, 0), device(0, 1)]
    result = transform(item, make_strategy(replicas, ar={"bn/gamma": {}, "bn/beta": {}}))
    kinds = {node.op for node in result.item.graph_def.node if "AutoDist-SyncBN" in node.name}
    assert kinds & {"CollectiveGatherV2", "CollectiveReduceV2"}
    node = cluster(1).open(result)
    _step(node, built)
    want = _reference()
    for (prefix, name), value in _copies(node).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-6, atol=1e-6, err_msg=prefix + name)


def test_across_nodes_with_parameter_servers_the_statistics_are_relayed_through_the_chief(cluster):
    build = _model(True, server_variable=True)
    replicas = [device(0, 0), device(0, 1), device(1, 0), device(1, 1)]
    strategy = make_strategy(replicas, ps={name: dict(device=device(0, 0)) for name in ("scale", "bn/gamma", "bn/beta")})
    results = transform_job(build, strategy, 2)
    assert not [n for n in results[1].item.graph_def.node if "AutoDist-SyncBN" in n.name and "Collective" in n.op]
    _, built = capture(build)
    nodes = cluster(2).open_job(results)
    parallel([lambda n=n: _step(n, built) for n in nodes])
    want = _reference()
    for node in nodes:   # (the server variable is 1: the gradients are the reference's)
        for (prefix, name), value in _copies(node).items():
            np.testing.assert_allclose(value, want[name], rtol=1e-6, atol=1e-6, err_msg=prefix + name)


@pytest.mark.parametrize("statistic", ["moving_mean", "moving_variance"])
def test_per_replica_statistics_are_read_as_their_mean_over_the_jobs_replicas(cluster, statistic):
    build = _model(False)
    replicas = [device(0, 0), device(0, 1), device(1, 0), device(1, 1)]
    results = transform_job(build, make_strategy(replicas, ar={"bn/gamma": {}, "bn/beta": {}}), 2)
    assert results[0].on_read == {"bn/" + v: mean_on_read_name("bn/" + v) + ":0"
                                  for v in ("moving_mean", "moving_variance")}
    _, built = capture(build)
    nodes = cluster(2).open_job(results)
    parallel([lambda n=n: _step(n, built) for n in nodes])
    copies = [copy for node in nodes for (_, name), copy in _copies(node).items() if name == statistic]
    assert not np.allclose(copies[0], copies[-1])   # each replica kept its own shard's statistics
    for node in nodes:
        for replica in node.assignment.local:
            mean = node.run(replica.prefix + mean_on_read_name("bn/" + statistic) + ":0")
            np.testing.assert_allclose(mean, np.mean(copies, axis=0), rtol=1e-6)


def test_more_statistics_than_their_key_window_holds_is_refused_while_the_graph_is_built(monkeypatch):
    """Marker i has key base + the 'statistics' window's first + i: a model with more markers than the window
    holds would take the every-step keys; it is refused by name (here a window of no key, the layer has a marker)."""
    from autodist.errors import TransformError
    from autodist.kernel.synchronization import statistics
    monkeypatch.setattr(statistics, "key_window", lambda name: {"statistics": (70000, 70000)}[name])
    item, _ = capture(_model(True))
    with pytest.raises(TransformError, match="more than 0 synchronized batch-norm statistics"):
        transform(item, make_strategy([device(0, 0), device(0, 1)], ar={"bn/gamma": {}, "bn/beta": {}}))
