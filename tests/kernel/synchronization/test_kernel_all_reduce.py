"""All-reduce synchronization: fused collectives per group, instance keys, sparse all-gather, numbers.

A sparse gradient is all-gathered: every replica applies the concatenation of
all replicas' rows divided by the number of replicas. The models here have
gradients that do not depend on the variables, so the expected values are
plain sums computed with numpy.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist.plan import contract
from autodist.plan.names import INIT_KEY_OFFSET
from kernel_harness import capture, device, make_strategy, nodes_by_name, parallel, tf1, transform, transform_job

T0C0, T0C1, T1C0 = device(0, 0), device(0, 1), device(1, 0)
LR = 0.1
ROW_GRAD = np.array([1.0, 2.0], np.float32)     # d loss / d emb[i] for each looked-up id i


def _model():
    x = tf1.placeholder(tf.float32, [None, 5], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    a = tf1.get_variable("a", initializer=tf.zeros([2]))
    b = tf1.get_variable("b", initializer=tf.zeros([3]))
    c = tf1.get_variable("c", initializer=tf.zeros([4]))
    emb = tf1.get_variable("emb", initializer=tf.constant(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2)))
    mean_x = tf.reduce_mean(x, 0)
    loss = (tf.reduce_sum(mean_x[:2] * a) + tf.reduce_sum(mean_x[2:] * b) + tf.reduce_sum(mean_x[1:] * c)
            + tf.reduce_sum(tf.gather(emb, ids) * ROW_GRAD))
    return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(loss)}


STRATEGY_VARS = {"a": dict(group=0), "b": dict(group=0), "c": dict(group=1), "emb": dict(group=0)}


def _const(nodes, name):
    """The value of a Const input, or None for a computed one (a sparse gather's size-bucketed key)."""
    node = nodes[name.split(":")[0]]
    return int(tf.make_ndarray(node.attr["value"].tensor)) if node.op == "Const" else None


def _collectives(nodes):
    """(op type, dtype, device, group size, group key, instance key) of every collective of the graph."""
    found = []
    for node in nodes.values():
        if node.op in ("CollectiveReduceV2", "CollectiveGatherV2", "CollectiveBcastSendV2", "CollectiveBcastRecvV2"):
            offset = 0 if node.op == "CollectiveBcastRecvV2" else 1
            size, group, instance = (_const(nodes, node.input[offset + i]) for i in range(3))
            dtype = tf.as_dtype(node.attr["T"].type).name
            found.append((node.op, dtype, node.device, size, group, instance))
    return found


@pytest.fixture(scope="module")
def one_node():
    item, _ = capture(_model)
    return transform(item, make_strategy([T0C0, T0C1], ar=STRATEGY_VARS))


def _dense_collectives(nodes, op):
    """(device, instance key) of the dense groups' collectives of type ``op`` (constant keys, float32)."""
    return [(c[2], c[5]) for c in _collectives(nodes) if c[0] == op and c[1] == "float32" and c[5] is not None]


def _assert_one_collective_per_group_and_replica(found, nodes):
    # three dense variables in two groups: two collectives per replica, not three
    assert sorted(device for device, _ in found) == [T0C0, T0C0, T0C1, T0C1]
    by_key = {}
    for device, key in found:
        by_key.setdefault(key, []).append(device)
    assert sorted(sorted(v) for v in by_key.values()) == [[T0C0, T0C1], [T0C0, T0C1]]
    flat = nodes["AutoDist-AllReduce/group_0/AutoDist-Replica-1/pack"]
    assert flat.op == "ConcatV2" and len([i for i in flat.input if not i.startswith("^")]) == 3  # 2 + axis


def test_a_group_of_dense_gradients_is_one_collective_per_replica(one_node):
    # the groups are a few bytes: each is all-gathered and added by every replica (contract.GATHER_BYTES)
    nodes = nodes_by_name(one_node.item.graph_def)
    assert not _dense_collectives(nodes, "CollectiveReduceV2")
    _assert_one_collective_per_group_and_replica(_dense_collectives(nodes, "CollectiveGatherV2"), nodes)


def test_a_bucket_past_gather_bytes_is_ring_all_reduced(monkeypatch):
    monkeypatch.setattr(contract, "GATHER_BYTES", 0)
    item, _ = capture(_model)
    nodes = nodes_by_name(transform(item, make_strategy([T0C0, T0C1], ar=STRATEGY_VARS)).item.graph_def)
    assert not _dense_collectives(nodes, "CollectiveGatherV2")
    _assert_one_collective_per_group_and_replica(_dense_collectives(nodes, "CollectiveReduceV2"), nodes)


def test_instance_keys_are_the_jobs_and_shared_by_every_replica(one_node):
    assignment = one_node.assignment
    collectives = _collectives(nodes_by_name(one_node.item.graph_def))
    assert {(c[3], c[4]) for c in collectives} == {(2, assignment.group_key)}
    training = [c for c in collectives if c[0] in ("CollectiveReduceV2", "CollectiveGatherV2")]
    keys = {c[5] for c in training} - {None}
    assert len([c for c in training if c[5] is None]) == 4      # values and indices gathers, per replica
    assert all(assignment.key_base < k < assignment.key_base + INIT_KEY_OFFSET for k in keys)
    init_keys = {c[5] for c in collectives if c[0].startswith("CollectiveBcast")}
    assert all(k >= assignment.key_base + INIT_KEY_OFFSET for k in init_keys)
    for key in keys:      # every key is used once on each replica's device
        assert sorted(c[2] for c in training if c[5] == key) == [T0C0, T0C1]


def test_sparse_gradients_are_all_gathered(one_node):
    nodes = nodes_by_name(one_node.item.graph_def)
    gathers = [n for n in nodes.values() if n.op == "CollectiveGatherV2" and n.name.startswith("AutoDist-AllReduce/sparse/")]
    assert len(gathers) == 6 and {n.device for n in gathers} == {T0C0, T0C1}
    # counts, values, indices: the padding's size comes from the gathered counts, not another collective
    assert not any(n.op.startswith("CollectiveReduce") and n.name.startswith("AutoDist-AllReduce/sparse/")
                   for n in nodes.values())
    assert not any(n.op == "UnsortedSegmentSum" and n.name.startswith("AutoDist-AllReduce/") for n in nodes.values())


def _expected_emb(initial, steps):
    """Each step: every replica's rows, summed, divided by the number of replicas."""
    emb = initial.copy()
    for per_replica in steps:
        for ids in per_replica:
            for i in ids:
                emb[i] -= LR * ROW_GRAD / len(per_replica)
    return emb


# Row counts that change from step to step (1/3, 5/2, 1/0): the gathers pad to
# powers of two and use the instance key of that size.
SPARSE_STEPS = [([1], [2, 2, 5]), ([0, 1, 2, 3, 4], [7, 7]), ([6], [])]


def test_one_node_sparse_and_dense_numbers(one_node, cluster):
    node = cluster(1).open(one_node)
    initial = node.read("AutoDist-Replica-0/emb")
    x = [np.arange(10, dtype=np.float32).reshape(2, 5), np.ones([2, 5], np.float32)]
    for ids in SPARSE_STEPS:
        node.train({"ids:0": [np.array(i, np.int32) for i in ids], "x:0": x})
    want = _expected_emb(initial, SPARSE_STEPS)
    for replica in ("AutoDist-Replica-0/", "AutoDist-Replica-1/"):
        np.testing.assert_allclose(node.read(replica + "emb"), want, rtol=1e-6, atol=1e-7)
        mean_x = (x[0].mean(0) + x[1].mean(0)) / 2
        np.testing.assert_allclose(node.read(replica + "c"), -LR * 3 * mean_x[1:], rtol=1e-6)
        np.testing.assert_allclose(node.read(replica + "a"), -LR * 3 * mean_x[:2], rtol=1e-6)


def test_two_nodes_sparse_and_dense_numbers(cluster):
    strategy = make_strategy([T0C0, T0C1, T1C0], ar=STRATEGY_VARS)
    chief, other = cluster(2).open_job(transform_job(_model, strategy, num_tasks=2))
    initial = chief.read("AutoDist-Replica-0/emb")
    steps = [([3], [3, 4], [0, 0, 0, 1, 2]), ([1, 2, 3, 4], [], [7])]
    xs = [np.full([2, 5], float(r + 1), np.float32) for r in range(3)]
    for ids in steps:
        parallel([lambda: chief.train({"ids:0": [np.array(i, np.int32) for i in ids[:2]], "x:0": xs[:2]}),
                  lambda: other.train({"ids:0": [np.array(ids[2], np.int32)], "x:0": xs[2:]})])
    want = _expected_emb(initial, steps)
    copies = [(chief, "AutoDist-Replica-0/"), (chief, "AutoDist-Replica-1/"), (other, "AutoDist-Replica-0/")]
    for node, prefix in copies:
        np.testing.assert_allclose(node.read(prefix + "emb"), want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(node.read(prefix + "b"), -LR * 2 * np.full(3, 2.0, np.float32), rtol=1e-6)


def test_every_replica_gets_the_same_bits_of_a_gathered_bucket(cluster):
    # three replicas on two nodes: each adds the gathered rows itself, in replica order
    strategy = make_strategy([T0C0, T0C1, T1C0], ar=STRATEGY_VARS)
    chief, other = cluster(2).open_job(transform_job(_model, strategy, num_tasks=2))
    xs = [np.random.RandomState(r).uniform(-1, 1, [2, 5]).astype(np.float32) for r in range(3)]
    ids = [np.array([1], np.int32)] * 3
    for _ in range(2):
        parallel([lambda: chief.train({"ids:0": ids[:2], "x:0": xs[:2]}),
                  lambda: other.train({"ids:0": ids[2:], "x:0": xs[2:]})])
    for var in ("a", "b", "c"):
        first = chief.read("AutoDist-Replica-0/" + var)
        np.testing.assert_array_equal(chief.read("AutoDist-Replica-1/" + var), first)
        np.testing.assert_array_equal(other.read("AutoDist-Replica-0/" + var), first)


def test_one_node_dense_numbers_by_ring(monkeypatch, cluster):
    monkeypatch.setattr(contract, "GATHER_BYTES", 0)
    item, _ = capture(_model)
    node = cluster(1).open(transform(item, make_strategy([T0C0, T0C1], ar=STRATEGY_VARS)))
    x = [np.arange(10, dtype=np.float32).reshape(2, 5), np.ones([2, 5], np.float32)]
    for ids in SPARSE_STEPS:
        node.train({"ids:0": [np.array(i, np.int32) for i in ids], "x:0": x})
    mean_x = (x[0].mean(0) + x[1].mean(0)) / 2
    for replica in ("AutoDist-Replica-0/", "AutoDist-Replica-1/"):
        np.testing.assert_allclose(node.read(replica + "c"), -LR * 3 * mean_x[1:], rtol=1e-6)
        np.testing.assert_allclose(node.read(replica + "a"), -LR * 3 * mean_x[:2], rtol=1e-6)
