"""contract: the Strategy protobuf read into typed entries and written from them, with its one set of rules."""
import pytest

from autodist.errors import StrategyError
from autodist.plan.contract import (AllReduceEntry, CollectiveSpec, Compressor, Partition, PSEntry, even_sizes,
                                      map_destinations, parse_partitioner, read_entries, variable_entry, write_entry)
from autodist.proto import strategy_pb2
from hand_plans import AR, device, make_strategy

T0C0, T1C0 = device(0, 0), device(1, 0)


def test_enums_are_the_protobufs_names_and_numbers():
    assert {c.name: c.value for c in Compressor} == dict(AR.Compressor.items())
    assert {s.name: s.value for s in CollectiveSpec} == dict(AR.Spec.items())


def test_even_sizes_give_the_first_shards_the_extra_rows():
    assert even_sizes(10, 4) == (3, 3, 2, 2)
    assert even_sizes(8, 4) == (2, 2, 2, 2)
    assert even_sizes(3, 3) == (1, 1, 1)


def test_partitioner_strings_and_shard_names():
    assert Partition.of("v", 2, 0, 4).partitioner == "4,1"
    assert Partition.of("v", 3, 1, 2).partitioner == "1,2,1"
    assert Partition.of("v", 1, 0, 3).partitioner == "3"
    assert parse_partitioner("1,2,1") == (3, 1, 2)
    assert parse_partitioner("4") == (1, 0, 4)
    assert Partition.of("emb", 2, 0, 2).shard_var_names == ("emb/part_0:0", "emb/part_1:0")
    assert Partition.of("scope/emb", 2, 0, 4).shard_names[3] == "scope/emb/part_3"
    assert Partition.of("v", 1, 0, 3).sizes(10) == (4, 3, 3)
    assert Partition.of("v", 1, 0, 2, (7, 3)).sizes(10) == (7, 3)


@pytest.mark.parametrize("text", ["a,1", "2,2", "0,1", "2,x", "-2"])
def test_malformed_partitioner_strings(text):
    with pytest.raises(StrategyError, match="partitioner"):
        parse_partitioner(text)


@pytest.mark.parametrize("text", ["", "1", "1,1"])
def test_a_partitioner_of_ones_splits_nothing(text):
    assert parse_partitioner(text) is None


def _node(strategy, name):
    return next(n for n in strategy.node_config if n.var_name == name + ":0")


def test_entries_are_typed_and_shards_stand_for_their_variable():
    strategy = make_strategy([T0C0, T1C0], ps={"w": dict(device=T1C0, staleness=2, proxy=True)},
                             ar={"b": dict(group=3, compressor=AR.PowerSGDCompressor, rank=0)},
                             partitions={"w": ("1,2", [3, 1])})
    entries = read_entries(strategy)
    assert entries.replicas == (T0C0, T1C0)
    w, b = entries.variables["w"], entries.variables["b"]
    assert w.synchronizer == PSEntry(T1C0, sync=True, staleness=2, proxy=True)
    assert w.partition == Partition(2, 1, 2, (3, 1), ("w/part_0", "w/part_1"))
    assert [p.var_name for p in w.parts] == ["w/part_0:0", "w/part_1:0"]
    assert b.synchronizer == AllReduceEntry(group=3, compressor=Compressor.PowerSGDCompressor, powersgd_rank=1)
    assert entries.partitions == {"w": w.partition}
    assert sorted(entries.synchronized) == ["b", "w/part_0", "w/part_1"]


def test_writing_entries_gives_the_bytes_builders_wrote_field_by_field():
    by_hand = strategy_pb2.Strategy()
    node = by_hand.node_config.add(var_name="emb:0", partitioner="2,1", shard_sizes=[7, 3])
    node.PSSynchronizer.reduction_destination = "a:CPU:0"
    node.PSSynchronizer.sync = True
    for i, server in enumerate(("a:CPU:0", "b:CPU:0")):
        part = node.part_config.add(var_name="emb/part_{}:0".format(i))
        part.PSSynchronizer.reduction_destination = server
        part.PSSynchronizer.sync = True
    node = by_hand.node_config.add(var_name="b:0")
    node.AllReduceSynchronizer.SetInParent()
    written = strategy_pb2.Strategy()
    partition = Partition.of("emb", 2, 0, 2, (7, 3))
    write_entry(written.node_config.add(),
                variable_entry("emb:0", "emb", [PSEntry("a:CPU:0", True), PSEntry("b:CPU:0", True)], partition))
    write_entry(written.node_config.add(), variable_entry("b:0", "b", [AllReduceEntry()]))
    assert written.SerializeToString(deterministic=True) == by_hand.SerializeToString(deterministic=True)
    entries = read_entries(written).variables
    assert [e.op_name for e in entries["emb"].parts] == ["emb/part_0", "emb/part_1"]
    again = strategy_pb2.Strategy()
    for entry in entries.values():
        write_entry(again.node_config.add(), entry)
    assert again == written


def test_map_destinations_rewrites_every_server_and_nothing_else():
    strategy = make_strategy([T0C0], ps={"w": dict(device="a:CPU:0")}, ar={"b": {}},
                             partitions={"w": ("2,1", [])})
    for node in strategy.node_config:
        map_destinations(node, lambda device, var_name: "{}@{}".format(device, var_name))
    w = read_entries(strategy).variables["w"]
    assert w.synchronizer.destination == "a:CPU:0@w:0"
    assert [p.synchronizer.destination for p in w.parts] == ["a:CPU:0@w/part_0:0", "a:CPU:0@w/part_1:0"]
    assert read_entries(strategy).variables["b"].synchronizer == AllReduceEntry()


@pytest.mark.parametrize("partitions, problem", [
    ({"W": ("2,x", [])}, "is not a list of shard counts"),
    ({"W": ("2,2", [])}, "must split exactly one axis"),
    ({"W": ("2,1", [1, 1, 2])}, "has 3 shard_sizes for 2 shards"),
    ({"W": ("1,1", [2, 2])}, "splits nothing"),
], ids=["not-counts", "two-axes", "sizes-count", "sizes-without-split"])
def test_malformed_entries_name_the_variable(partitions, problem):
    strategy = make_strategy([T0C0], ps={"W": dict(device=T0C0)}, partitions=partitions)
    with pytest.raises(StrategyError) as error:
        read_entries(strategy)
    assert str(error.value).startswith("variable 'W': ") and problem in str(error.value)


def test_part_config_names_must_be_the_shards():
    strategy = make_strategy([T0C0], ps={"W": dict(device=T0C0)}, partitions={"W": ("2,1", [])})
    _node(strategy, "W").part_config[1].var_name = "W/shard_1:0"
    with pytest.raises(StrategyError, match="variable 'W': part_config names"):
        read_entries(strategy)


def test_a_variable_listed_twice_is_refused():
    strategy = make_strategy([T0C0], ps={"W": dict(device=T0C0)})
    strategy.node_config.add().CopyFrom(strategy.node_config[0])
    with pytest.raises(StrategyError, match="'W' has two entries"):
        read_entries(strategy)


def test_an_unknown_compressor_number_is_refused():
    strategy = make_strategy([T0C0], ar={"b": dict(compressor=9)})
    with pytest.raises(StrategyError, match="variable 'b': AllReduceSynchronizer"):
        read_entries(strategy)


def test_small_synchronous_pushes_to_one_server_share_a_bucket():
    from autodist.plan.contract import FUSED_BUCKET_BYTES, FUSED_PUSH_BYTES, fused_pushes
    small, large = 1024, FUSED_PUSH_BYTES + 1
    pieces = [("a", "s0", "float32", small, True), ("big", "s0", "float32", large, True),
              ("b", "s0", "float32", small, True), ("c", "s1", "float32", small, True),
              ("half", "s0", "float16", small, True), ("async", "s0", "float32", small, False),
              ("d", "s1", "float32", small, True), ("e", "s0", "float32", small, True)]
    # a, b and e to s0 (float32) in one bucket, c and d to s1 in another; a lone half piece, a large one and
    # an asynchronous one go alone; buckets are numbered by their first piece
    assert fused_pushes(pieces) == {"a": 0, "b": 0, "e": 0, "c": 1, "d": 1}
    full = FUSED_BUCKET_BYTES // FUSED_PUSH_BYTES
    many = [("v{}".format(i), "s0", "float32", FUSED_PUSH_BYTES, True) for i in range(full + 2)]
    buckets = fused_pushes(many)
    assert [buckets["v{}".format(i)] for i in range(full + 2)] == [0] * full + [1, 1], "closed when full"
