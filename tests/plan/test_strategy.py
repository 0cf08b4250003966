"""assemble: the one maker of a Strategy message, from typed entries or from another plan's nodes."""
from autodist.plan.contract import AllReduceEntry, Partition, PSEntry, read_entries, variable_entry
from autodist.plan.strategy import Strategy, assemble, content_id
from hand_plans import device, make_strategy

T0C0, T0C1 = device(0, 0), device(0, 1)


def _entries():
    return [variable_entry("W:0", "W", [PSEntry(T0C0, sync=True)]),
            variable_entry("emb:0", "emb", [PSEntry(T0C0), PSEntry(T0C1)], Partition.of("emb", 2, 0, 2)),
            variable_entry("b:0", "b", [AllReduceEntry(group=1)])]


def test_entries_are_written_in_order_and_read_back_as_they_were():
    strategy = assemble(_entries(), [T0C0, T0C1])
    assert isinstance(strategy, Strategy) and strategy.id == strategy.proto.id == content_id(strategy.proto)
    assert list(read_entries(strategy).variables.values()) == _entries()
    assert list(strategy.graph_config.replicas) == [T0C0, T0C1]


def test_nodes_of_another_plan_are_copied_as_they_are():
    other = make_strategy([T0C0], ps={"W": dict(device=T0C0, staleness=2)}, ar={"b": dict(rank=1)})
    again = assemble(other.node_config, other.graph_config.replicas)
    assert list(again.node_config) == list(other.node_config)   # rank 1 stays spelled 1: nothing reformatted
    again.proto.node_config[0].var_name = "changed:0"
    assert other.node_config[0].var_name == "W:0"               # copies, not the same messages


def test_accumulation_steps_of_one_leave_the_plan_and_its_id_as_they_were():
    plain = assemble(_entries(), [T0C0])
    assert assemble(_entries(), [T0C0], accumulation_steps=1) == plain
    assert assemble(_entries(), [T0C0], accumulation_steps=0) == plain
    four = assemble(plain.node_config, plain.graph_config.replicas, 4)
    assert four.graph_config.accumulation_steps == 4 and four.id != plain.id
    assert read_entries(four).accumulation_steps == 4
