"""prune_graph, topologic_order_graph and consumer_map: data and control edges, linear, iterative."""
import pytest

from autodist.ir import IRGraph, prune_graph, topologic_order_graph
from autodist.ir.utils import consumer_map, gc_frozen, gc_paused, predecessors


def _assert_topological(ugraph):
    position = {name: i for i, name in enumerate(ugraph.topo_order)}
    assert sorted(position) == sorted(ugraph.ops_info)
    for op in ugraph.ops:
        for pred in predecessors(op):
            assert position[pred] < position[op.name], (pred, op.name)


def test_order_is_topological_over_data_and_control_edges(diamond):
    _assert_topological(diamond)
    assert diamond.topo_order.index("d") < diamond.topo_order.index("f")  # control edge


def test_order_puts_what_outputs_need_first_and_keeps_everything(diamond):
    assert diamond.topo_order == ["a", "b", "c", "d", "f", "e"]


def test_order_is_stable_once_sorted(make_ir):
    spec = {"z": ("Const", [], 1), "y": ("Neg", ["z"], 1), "x": ("Neg", ["y", "^w"], 1),
            "w": ("Const", [], 1), "v": ("Const", [], 1)}
    first = make_ir(spec, ["x"])
    resorted = make_ir({name: spec[name] for name in first.topo_order}, ["x"])
    assert resorted.topo_order == first.topo_order
    topologic_order_graph(resorted)
    assert resorted.topo_order == first.topo_order


@pytest.mark.parametrize("spec, cycle", [
    ({"a": ("Neg", ["b"], 1), "b": ("Neg", ["a"], 1)}, ["a -> b -> a", "b -> a -> b"]),
    ({"a": ("Neg", ["a"], 1)}, ["a -> a"]),
    ({"a": ("NoOp", ["^c"], 1), "b": ("Neg", ["a"], 1), "c": ("Neg", ["b"], 1)},
     ["a -> b -> c -> a", "b -> c -> a -> b", "c -> a -> b -> c"]),
], ids=["two-ops", "self-loop", "through-control-edge"])
def test_cycles_are_rejected_naming_the_cycle(make_ir, spec, cycle):
    ugraph = make_ir(spec, [], sort=False)
    with pytest.raises(ValueError, match="cycle") as err:
        topologic_order_graph(ugraph)
    assert any(c in str(err.value) for c in cycle), str(err.value)


def test_missing_producer_and_output_are_reported(make_ir):
    ugraph = make_ir({"a": ("Neg", ["ghost"], 1)}, ["a"], sort=False)
    with pytest.raises(ValueError, match="op 'a' depends on op 'ghost'"):
        topologic_order_graph(ugraph)
    ugraph = make_ir({"a": ("Const", [], 1)}, ["nope"], sort=False)
    with pytest.raises(ValueError, match=r"output nodes \['nope'\]"):
        topologic_order_graph(ugraph)


def test_deep_chains_need_no_recursion(make_ir):
    depth = 20000
    spec = {"n0": ("Const", [], 1)}
    spec.update({"n{}".format(i): ("Neg", ["n{}".format(i - 1)], 1) for i in range(1, depth)})
    ugraph = make_ir(dict(reversed(list(spec.items()))), ["n{}".format(depth - 1)])
    assert ugraph.topo_order == ["n{}".format(i) for i in range(depth)]
    assert len(prune_graph(ugraph, ["n10"])) == 11


def test_prune_keeps_exactly_what_outputs_need(diamond):
    pruned = prune_graph(diamond)
    assert sorted(pruned.ops_info) == ["a", "b", "c", "d", "f"]  # f needs d by control edge
    assert pruned.topo_order == ["a", "b", "c", "d", "f"]
    assert not pruned.is_dangling
    only_b = prune_graph(diamond, ["b"])
    assert only_b.output_nodes == ["b"] and sorted(only_b.ops_info) == ["a", "b"]


def test_prune_copies_and_leaves_its_input_alone(diamond):
    before = list(diamond.topo_order)
    pruned = prune_graph(diamond)
    assert "e" in diamond.ops_info and diamond.topo_order == before
    assert all(op.ugraph is pruned for op in pruned.ops)
    assert pruned.ops_info["d"] is not diamond.ops_info["d"]
    assert all(t.ugraph is pruned for op in pruned.ops for t in op.input_tensors)


def test_prune_rejects_unknown_outputs_and_missing_producers(diamond, make_ir):
    with pytest.raises(ValueError, match="nope"):
        prune_graph(diamond, ["nope"])
    broken = make_ir({"a": ("NoOp", ["^ghost"], 0)}, ["a"], sort=False)
    with pytest.raises(ValueError, match="'ghost'"):
        prune_graph(broken)
    with pytest.raises(TypeError, match="IRGraph"):
        prune_graph("graph")


def test_consumer_map_indexes_every_data_edge(diamond):
    consumers = consumer_map(diamond)
    assert [(op.name, i) for op, i in consumers["a:0"]] == [("b", 0), ("c", 0)]
    assert [(op.name, i) for op, i in consumers["c:1"]] == [("d", 1)]
    assert "c:0" not in consumers and "d:0" not in consumers  # f's edge is a control edge


def test_gc_paused_restores_the_collector_state():
    import gc
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            assert not gc.isenabled()
            raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_gc_frozen_keeps_the_collections_off_the_heap_before_it_and_gives_it_back():
    import gc
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError):
        with gc_frozen():
            assert gc.get_freeze_count() > 0 and gc.isenabled()   # the block's own garbage is still collected
            raise RuntimeError
    assert gc.get_freeze_count() == 0
    gc.freeze()   # a heap the caller froze stays frozen
    try:
        frozen = gc.get_freeze_count()
        with gc_frozen():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    gc.disable()   # a collector that is off: nothing to do, left off
    try:
        with gc_frozen():
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_empty_graph_sorts():
    ugraph = IRGraph([])
    topologic_order_graph(ugraph)
    assert ugraph.topo_order == [] and ugraph.ops == []
