"""The partition pass: shards, their slots, rebuilt reads, split gradients; trains like the unsplit graph."""
import numpy as np
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel import partition_ops as pops
from autodist.plan.contract import even_sizes, read_entries
from autodist.kernel.partitioner import Partitioner
from kernel_harness import capture, device, make_strategy, nodes_by_name, tf1

CPU = device(0, 0)
STEPS = 3


def _build():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    ids = tf1.placeholder(tf.int64, [None], name="ids")
    w = tf1.get_variable("W", initializer=tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10))
    emb = tf1.get_variable("emb", initializer=tf.constant(np.arange(14, dtype=np.float32).reshape(7, 2) / 7))
    hidden = tf.matmul(x, w)                                                 # [None, 3]
    looked_up = tf.gather(emb, ids)                                          # [None, 2]
    per_example = tf.reduce_sum(tf.square(hidden), 1) + tf.reduce_sum(tf.square(looked_up - 1.0), 1)
    loss = tf.reduce_mean(per_example, name="loss")
    train = tf1.train.AdamOptimizer(0.05).minimize(loss)
    return {"train": train, "loss": loss, "W": w, "emb": emb}


def _feeds(step):
    rs = np.random.RandomState(step)
    return {"x:0": rs.rand(5, 4).astype(np.float32), "ids:0": np.array([0, 6, 3, 3, 5 - step], np.int64)}


PARTITIONS = {"W": ("1,2", []), "emb": ("3,1", [3, 2, 2])}


def _strategy(partitions=PARTITIONS):
    return make_strategy([CPU], ps={"W": dict(device=CPU), "emb": dict(device=CPU)}, partitions=partitions)


@pytest.fixture(scope="module")
def partitioned():
    item, _ = capture(_build)
    before = item.graph.as_graph_def().SerializeToString(deterministic=True)
    result = Partitioner(read_entries(_strategy()))(item)
    assert item.graph.as_graph_def().SerializeToString(deterministic=True) == before
    return item, result.item, result.details


def test_partition_info(partitioned):
    _, _, infos = partitioned
    w, emb = infos["W"], infos["emb"]
    assert (w.axis, w.shards, w.sizes) == (1, ("W/part_0", "W/part_1"), (2, 1))
    assert (emb.axis, emb.shards, emb.sizes) == (0, ("emb/part_0", "emb/part_1", "emb/part_2"), (3, 2, 2))
    assert w.slots == {"W/Adam": ("W/Adam/part_0", "W/Adam/part_1"),
                       "W/Adam_1": ("W/Adam_1/part_0", "W/Adam_1/part_1")}
    assert set(w.aliases) == {"W/Read/ReadVariableOp:0", "W/Adam/Read/ReadVariableOp:0",
                              "W/Adam_1/Read/ReadVariableOp:0"}


def test_shards_replace_the_variable_in_graph_info_and_records(partitioned):
    item, out, infos = partitioned
    nodes = nodes_by_name(out.graph_def)
    assert "W" not in nodes and "emb" not in nodes and "W/Adam" not in nodes
    assert {"W/part_0", "W/part_1", "emb/part_2", "W/Adam_1/part_1"} <= set(nodes)
    assert "beta1_power" in nodes                          # shared optimizer state is not split
    variables = {v.variable_name for v in out.info.variables}
    assert "W:0" not in variables and {"W/part_0:0", "emb/part_2:0", "emb/Adam/part_0:0"} <= variables
    targets = [r.target for r in out.grad_records]
    assert sorted(targets) == ["W/part_0:0", "W/part_1:0", "emb/part_0:0", "emb/part_1:0", "emb/part_2:0"]
    assert all(r.is_sparse for r in out.grad_records if r.target.startswith("emb/"))
    assert out.train_op_names == item.train_op_names


def _train(graph_def, variables, train_ops, fetches):
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    with tf1.Session(graph=graph) as sess:
        sess.run([v.initializer_name for v in variables])
        initial = sess.run(fetches[1:])
        losses = []
        for step in range(STEPS):
            losses.append(sess.run([fetches[0]] + train_ops, _feeds(step))[0])
        return initial, losses, sess.run(fetches[1:])


def test_partitioned_graph_trains_like_the_original(partitioned):
    item, out, infos = partitioned
    names = ["loss:0", "W/Read/ReadVariableOp:0", "emb/Read/ReadVariableOp:0", "W/Adam/Read/ReadVariableOp:0"]
    want = _train(item.graph.as_graph_def(), item.info.variables, item.train_op_names, names)
    aliases = {}
    for info in infos.values():
        aliases.update(info.aliases)
    got = _train(out.graph_def, out.info.variables, out.train_op_names, [aliases.get(n, n) for n in names])
    for w, g in zip(want[0], got[0]):          # shards start from slices of the initial value
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    for w, g in zip(want[2], got[2]):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    assert not np.allclose(want[2][0], want[0][0])   # training did move W


def test_no_partition_returns_the_item_itself():
    item, _ = capture(_build)
    strategy = _strategy(partitions={"W": ("1,1", [])})
    entries = read_entries(strategy)
    assert entries.partitions == {}
    result = Partitioner(entries)(item)
    assert result.item is item and result.details == {}


@pytest.mark.parametrize("partitions, problem", [
    ({"W": ("2,1", [1, 2])}, "do not split dimension 0 of size 4"),
    ({"emb": ("1,2", [])}, "has sparse gradients and can only be split on axis 0"),
], ids=["sizes-sum", "sparse-axis-1"])
def test_bad_partitions_name_the_pass_and_variable(partitions, problem):
    item, _ = capture(_build)
    with pytest.raises(TransformError) as error:
        Partitioner(read_entries(_strategy(partitions)))(item)
    assert error.value.pass_name == "partition" and error.value.variable in partitions
    assert problem in str(error.value)


def test_a_variable_without_gradient_cannot_be_partitioned():
    def build():
        built = _build()
        tf1.get_variable("frozen", initializer=tf.ones([4, 2]), trainable=False)
        return built
    strategy = _strategy({})
    strategy.node_config.add(var_name="frozen:0", partitioner="2,1").PSSynchronizer.reduction_destination = CPU
    with pytest.raises(TransformError) as error:
        Partitioner(read_entries(strategy))(capture(build)[0])
    assert error.value.variable == "frozen" and "has no gradient" in str(error.value)


def test_a_read_the_partitioner_cannot_rebuild_names_the_op():
    def build():
        built = _build()
        tf.raw_ops.ResourceScatterAdd(resource=built["W"].handle, indices=[0],
                                      updates=tf.ones([1, 3]), name="user_scatter")
        return built
    with pytest.raises(TransformError) as error:
        Partitioner(read_entries(_strategy({"W": ("2,1", [])})))(capture(build)[0])
    assert (error.value.pass_name, error.value.variable, error.value.op) == ("partition", "W", "user_scatter")


def test_partition_ops_numbers():
    assert even_sizes(7, 3) == (3, 2, 2) and pops.offsets_of([3, 2, 2]) == [0, 3, 5]
    graph = tf.Graph()
    with graph.as_default():
        table = np.arange(14, dtype=np.float32).reshape(7, 2)
        shards = pops.make_shards("t", tf.constant(table), [3, 2, 2], 0, True, tf.float32)
        ids = tf.constant([[6, 0], [3, 5]])
        gathered = pops.sharded_gather(shards, [3, 2, 2], ids, "g")
        parts = pops.split_sparse(tf.constant([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]), tf.constant([6, 0, 3]),
                                  [3, 2, 2], [2], "s")
        with tf1.Session() as sess:
            sess.run([s.initializer for s in shards])
            np.testing.assert_array_equal(sess.run(gathered), table[[[6, 0], [3, 5]]])
            values, indices, shapes = zip(*sess.run(parts))
    assert [i.tolist() for i in indices] == [[0], [0], [1]]            # shard-local rows
    assert [v.tolist() for v in values] == [[[2.0, 2.0]], [[3.0, 3.0]], [[1.0, 1.0]]]
    assert [s.tolist() for s in shapes] == [[3, 2], [2, 2], [2, 2]]
