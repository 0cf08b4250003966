"""Initialization and finalize: identical initial values everywhere, job containers, importable colocation."""
import numpy as np
import tensorflow as tf

from autodist.capture.graph_item import GraphItem
from autodist.kernel.analysis import analyze
from autodist.kernel.assignment import assign
from autodist.plan.contract import read_entries
from autodist.kernel.finalizer import Finalizer
from autodist.kernel.graph_transformer import run_passes
from autodist.plan.names import INIT_OPS, INIT_SERVERS, INIT_SYNC, job_container
from autodist.kernel.replicator import Replicator
from autodist.kernel.synchronization import SyncBetweenGraph, SyncInGraph
from kernel_harness import capture, device, make_strategy, node_context, nodes_by_name, tf1, transform_job

T0C0, T0C1, T1C0, T1C1 = device(0, 0), device(0, 1), device(1, 0), device(1, 1)


def _model():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    noise = tf1.get_variable("noise", initializer=tf.random.normal([3, 2]))      # unseeded
    offset = tf1.get_variable("offset", initializer=tf.constant([1.0, 2.0]))
    on_server = tf1.get_variable("on_server", initializer=tf.random.uniform([2]))
    kernel = tf1.get_variable("dense/kernel", shape=[2, 2], initializer=tf1.glorot_uniform_initializer())
    bias = tf1.get_variable("dense/bias", shape=[2], initializer=tf1.zeros_initializer())
    out = tf.matmul(tf.matmul(x, noise), kernel) + bias + offset + on_server
    variables = [noise, offset, on_server, kernel, bias]
    loss = tf.reduce_sum(out)
    grads = tf.gradients(loss, variables)
    train = tf1.train.AdamOptimizer(0.1).apply_gradients(zip(grads, variables))
    return {"train": train}


def _strategy():
    return make_strategy([T0C0, T0C1, T1C0, T1C1], ps={"on_server": dict(device=T1C0)},
                         ar={"noise": {}, "offset": {}, "dense/kernel": {}, "dense/bias": {}})


def test_random_initial_values_are_identical_on_every_replica_and_node(cluster):
    results = transform_job(_model, _strategy(), num_tasks=2)
    nodes = cluster(2).open_job(results)
    for var in ("noise", "dense/kernel", "noise/Adam", "beta1_power"):
        values = [n.read("AutoDist-Replica-{}/{}".format(i, var)) for n in nodes for i in range(2)]
        for value in values[1:]:
            np.testing.assert_array_equal(value, values[0], err_msg=var)
    noise = nodes[1].read("AutoDist-Replica-1/noise")
    assert noise.std() > 0.1                                   # a random draw, not zeros
    np.testing.assert_array_equal(nodes[1].read("AutoDist-Replica-0/offset"), [1.0, 2.0])
    np.testing.assert_array_equal(nodes[0].read("AutoDist-Replica-1/noise/Adam"), np.zeros([3, 2]))
    assert nodes[0].read("on_server").shape == (2,)


def test_random_values_are_broadcast_from_the_chief_constants_are_not():
    chief, other = transform_job(_model, _strategy(), num_tasks=2)
    analysis = chief.assignment.analysis
    assert {"noise", "dense/kernel", "on_server"}.isdisjoint(analysis.deterministic)
    assert {"offset", "noise/Adam", "beta1_power"} <= analysis.deterministic
    chief_nodes, other_nodes = nodes_by_name(chief.item.graph_def), nodes_by_name(other.item.graph_def)
    # servers: the chief initializes the parameter server's variable and its root replica's copies
    servers = set(chief_nodes[INIT_SERVERS].input)
    assert {"^on_server/Assign", "^AutoDist-Replica-0/noise/Assign"} <= servers
    assert not [i for i in other_nodes[INIT_SERVERS].input if not i.startswith("^AutoDist-Splice")]
    sends = [n for n in chief_nodes.values() if n.op == "CollectiveBcastSendV2"]
    receives = [n for n in other_nodes.values() if n.op == "CollectiveBcastRecvV2"]
    assert [n.device for n in sends] == [T0C0] and sorted(n.device for n in receives) == [T1C0, T1C1]
    # the other node's replicas receive the random ones, and run the deterministic initializers themselves
    sync = set(other_nodes[INIT_SYNC].input)
    assert "^AutoDist-Replica-0/offset/Assign" in sync and "^AutoDist-Replica-0/noise/Assign" not in sync


def test_finalize_puts_resources_in_the_jobs_container_and_drops_dangling_colocation():
    item, _ = capture(_model)
    strategy = make_strategy([T0C0, T0C1], ps={"on_server": dict(device=T0C0)},
                             ar={"noise": {}, "offset": {}, "dense/kernel": {}, "dense/bias": {}})
    node = node_context()
    assignment = assign(analyze(item), read_entries(strategy), node)
    synced = run_passes(item, [Replicator(assignment), SyncInGraph(assignment), SyncBetweenGraph(assignment)]).item
    graph_def = synced.graph_def
    target = next(n for n in graph_def.node if n.name == "AutoDist-Replica-1/MatMul")
    target.attr["_class"].list.s[:] = [b"loc:@nowhere", b"loc:@AutoDist-Replica-1/x"]
    before = graph_def.SerializeToString(deterministic=True)
    handed = GraphItem(graph_def=graph_def)
    handed.info = synced.info.copy()
    handed.copy_gradient_info_from(synced)
    out = Finalizer(assignment)(handed).item
    assert handed.graph_def.SerializeToString(deterministic=True) == before
    nodes = nodes_by_name(out.graph_def)
    assert list(nodes["AutoDist-Replica-1/MatMul"].attr["_class"].list.s) == [b"loc:@AutoDist-Replica-1/x"]
    container = job_container(node.job_id).encode()
    handles = [n for n in nodes.values() if n.op == "VarHandleOp"]
    assert handles and all(n.attr["container"].s == container for n in handles)
    assert all(not n.attr["container"].s for n in nodes.values() if n.op == "Placeholder" and "container" in n.attr)
    assert set(INIT_OPS) <= set(nodes)
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(out.graph_def, name="")          # importable as a whole
