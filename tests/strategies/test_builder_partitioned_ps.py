"""PartitionedPS / UnevenPartitionedPS: shard counts, sizes, part names and placement."""
import pytest

from autodist.strategies import PartitionedPS, UnevenPartitionedPS
from autodist.strategies.report import plan_report

KIB = 1024


def parts(node):
    return [(p.var_name, p.PSSynchronizer.reduction_destination) for p in node.part_config]


def test_large_variable_split_evenly_over_distinct_servers(make_var, four_servers):
    # 4 MiB, 4 servers: shard target max(256 KiB, 5% of 1 MiB) -> 16 wanted, capped at 4
    variables = [make_var("emb", (4099, 256), sparse=True), make_var("bias", (256,))]
    strategy = PartitionedPS(staleness=1).build_from_variables(variables, four_servers)
    emb, bias = strategy.node_config
    assert emb.partitioner == "4,1" and list(emb.shard_sizes) == [], "even: sizes implied"
    assert parts(emb) == [("emb/part_{}:0".format(i), "10.0.0.{}:CPU:0".format(i + 1))
                          for i in range(4)]
    assert emb.PSSynchronizer.reduction_destination == "10.0.0.1:CPU:0", "top node = shard 0"
    assert all(p.PSSynchronizer.staleness == 1 and p.PSSynchronizer.sync for p in emb.part_config)
    assert not bias.partitioner
    # shards of 1025, 1025, 1025, 1024 rows: the bias goes to the server with 1024
    assert bias.PSSynchronizer.reduction_destination == "10.0.0.4:CPU:0"


@pytest.mark.parametrize("cls", [PartitionedPS, UnevenPartitionedPS])
def test_what_is_never_partitioned(cls, make_var, four_servers):
    big = (4096, 1024)
    variables = [make_var("loop", big, control_flow=True), make_var("unknown", (None, 1024)),
                 make_var("norank", None), make_var("row", (1, 1 << 20)),
                 make_var("small", (64, 64)), make_var("two", (2, 1 << 20))]
    nodes = cls().build_from_variables(variables, four_servers).node_config
    assert [n.partitioner for n in nodes] == ["", "", "", "", "", "2,1"]


@pytest.mark.parametrize("cls", [PartitionedPS, UnevenPartitionedPS])
def test_one_server_means_no_partitioning(cls, make_var, one_cpu):
    nodes = cls().build_from_variables([make_var("emb", (1 << 16, 64))], one_cpu).node_config
    assert not nodes[0].partitioner and \
        nodes[0].PSSynchronizer.reduction_destination == "127.0.0.1:CPU:0"


def test_uneven_shards_level_the_loads(make_var, four_servers):
    # 2 MiB that cannot be split (control flow) lands first on server 1; the 4 MiB
    # variable is then water-filled over the three empty servers only
    variables = [make_var("emb", (4096, 256)), make_var("loop", (2048, 256), control_flow=True)]
    uneven = UnevenPartitionedPS().build_from_variables(variables, four_servers)
    emb, loop = uneven.node_config
    assert loop.PSSynchronizer.reduction_destination == "10.0.0.1:CPU:0"
    assert emb.partitioner == "3,1" and list(emb.shard_sizes) == [1366, 1365, 1365]
    assert parts(emb) == [("emb/part_0:0", "10.0.0.2:CPU:0"), ("emb/part_1:0", "10.0.0.3:CPU:0"),
                          ("emb/part_2:0", "10.0.0.4:CPU:0")]
    even = PartitionedPS().build_from_variables(variables, four_servers)
    assert even.node_config[0].partitioner == "4,1"
    lam_uneven = plan_report(uneven, variables, four_servers).imbalance
    lam_even = plan_report(even, variables, four_servers).imbalance
    assert lam_uneven == pytest.approx(2 / 1.5, rel=1e-3) and lam_even == pytest.approx(2.0)


def test_uneven_sizes_are_always_written(make_var, four_servers):
    node = UnevenPartitionedPS().build_from_variables([make_var("emb", (4096, 256))], four_servers).node_config[0]
    assert node.partitioner == "4,1" and list(node.shard_sizes) == [1024] * 4


def test_many_variables_balance_within_the_target(make_var, four_servers):
    variables = [make_var("v{}".format(i), (64 * (1 + i % 13), 256)) for i in range(200)]
    variables.append(make_var("emb", (30000, 256), sparse=True))
    for cls in (PartitionedPS, UnevenPartitionedPS):
        strategy = cls().build_from_variables(variables, four_servers)
        assert plan_report(strategy, variables, four_servers).imbalance <= 1.05


@pytest.mark.parametrize("cls, sizes", [(PartitionedPS, []),
                                         (UnevenPartitionedPS, [21846, 21845, 21845])])
def test_the_real_graph(make_graph_item, two_nodes, cls, sizes):
    item = make_graph_item(emb_rows=1 << 16)        # emb [65536, 4]: 1 MiB
    nodes = {n.var_name: n for n in cls().build(item, two_nodes).node_config}
    assert nodes["emb:0"].partitioner == "3,1" and list(nodes["emb:0"].shard_sizes) == sizes
    assert [p.var_name for p in nodes["emb:0"].part_config] == \
        ["emb/part_0:0", "emb/part_1:0", "emb/part_2:0"]
    assert not nodes["loop_w:0"].partitioner and not nodes["W:0"].partitioner
