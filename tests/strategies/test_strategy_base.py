"""Strategy: content ids, copies, files and text; StrategyBuilder: abstract and pure."""
import os
import stat

import pytest
from google.protobuf import text_format

from autodist.errors import StrategyError
from autodist.proto import strategy_pb2
from autodist.strategies import (PSLoadBalancing, PartitionedPS, Strategy, StrategyBuilder,
                                 UnevenPartitionedPS)
from autodist.plan.strategy import content_id


@pytest.fixture
def strategy(make_var, two_nodes):
    variables = [make_var("W", (4, 3)), make_var("emb", (1 << 16, 16), sparse=True)]
    return UnevenPartitionedPS(sync=True, staleness=2).build_from_variables(variables, two_nodes)


def test_id_is_the_content_hash_and_identical_inputs_give_identical_bytes(make_var, two_nodes):
    variables = [make_var("W", (4, 3)), make_var("b", (3,))]
    first = PSLoadBalancing().build_from_variables(variables, two_nodes)
    second = PSLoadBalancing().build_from_variables(list(variables), two_nodes)
    assert first.proto.SerializeToString(deterministic=True) == \
        second.proto.SerializeToString(deterministic=True)
    assert first.id == second.id == content_id(first.proto)
    assert len(first.id) == 16 and int(first.id, 16) >= 0
    other = PSLoadBalancing(sync=False).build_from_variables(variables, two_nodes)
    assert other.id != first.id


def test_unsaved_strategy_id_follows_its_content():
    s = Strategy()
    empty_id = s.id
    s.node_config.add(var_name="a:0").PSSynchronizer.reduction_destination = "h:CPU:0"
    assert s.id != empty_id and s.proto.id == "", "nothing stored until saved"
    stored = Strategy.with_content_id(s.proto)
    assert stored.proto.id == stored.id


def test_content_id_ignores_id_and_path(strategy):
    proto = strategy_pb2.Strategy()
    proto.CopyFrom(strategy.proto)
    proto.id, proto.path = "other", "/somewhere"
    assert content_id(proto) == strategy.id


def test_copy_is_independent(strategy):
    copy = strategy.copy()
    assert copy == strategy and copy is not strategy and copy.id == strategy.id
    copy.node_config[0].var_name = "changed:0"
    assert strategy.node_config[0].var_name == "W:0"


def test_round_trip_through_a_file(strategy, tmp_path):
    path = tmp_path / "plans" / "s.pb"
    written = strategy.serialize(str(path))
    assert written == str(path) and strategy.path == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = Strategy.deserialize(path=str(path))
    assert loaded == strategy and loaded.path == str(path) and loaded.id == strategy.id
    assert list(loaded.node_config[1].shard_sizes) == list(strategy.node_config[1].shard_sizes)
    assert Strategy.deserialize(strategy.id, path=path) == strategy


def test_default_directory(strategy, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = strategy.serialize()
    assert path == str(tmp_path / ".autodist" / "strategies" / strategy.id)
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert Strategy.deserialize(strategy_id=strategy.id) == strategy


def test_deserialize_errors(strategy, tmp_path):
    with pytest.raises(StrategyError, match="strategy_id or a path"):
        Strategy.deserialize()
    with pytest.raises(FileNotFoundError):
        Strategy.deserialize(path=str(tmp_path / "missing"))
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(StrategyError, match="not a serialized autodist Strategy"):
        Strategy.deserialize(path=str(garbage))
    path = strategy.serialize(str(tmp_path / "s"))
    with pytest.raises(StrategyError, match="expected 'someone-else'"):
        Strategy.deserialize("someone-else", path=path)


def test_text_form_is_readable_and_parses_back(strategy):
    text = str(strategy)
    assert 'var_name: "emb/part_0:0"' in text and "staleness: 2" in text
    parsed = text_format.Parse(text, strategy_pb2.Strategy())
    assert parsed == strategy.proto
    assert repr(strategy) == "<Strategy {}: 2 nodes, 4 replicas>".format(strategy.id)


def test_strategy_wraps_only_strategy_messages():
    with pytest.raises(TypeError, match="autodist.proto.Strategy"):
        Strategy("not a proto")


def test_builder_is_abstract():
    with pytest.raises(TypeError):
        StrategyBuilder()

    class Custom(StrategyBuilder):
        def build(self, graph_item, resource_spec):
            return Strategy()

    assert isinstance(Custom().build(None, None), Strategy)


@pytest.mark.parametrize("builder", [PSLoadBalancing(), PartitionedPS()], ids=repr)
def test_build_is_pure(builder, make_graph_item, two_nodes):
    item = make_graph_item(emb_rows=1 << 16)
    version, records = item.graph.version, item.grad_records
    spec_data = two_nodes.to_dict()
    first, second = builder.build(item, two_nodes), builder.build(item, two_nodes)
    assert first == second
    assert item.graph.version == version and item.grad_records == records
    assert two_nodes.to_dict() == spec_data


def test_builder_repr():
    assert repr(PartitionedPS(staleness=1)) == \
        "PartitionedPS(local_proxy_variable=False, sync=True, staleness=1)"
