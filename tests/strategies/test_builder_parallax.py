"""Parallax: dense variables all-reduced, sparse ones on load-balanced parameter servers."""
import pytest

from autodist.proto import synchronizers_pb2
from autodist.strategies import AllReduce, Parallax

AR = synchronizers_pb2.AllReduceSynchronizer


def test_the_real_graph(graph_item, two_nodes):
    strategy = Parallax().build(graph_item, two_nodes)
    kinds = {n.var_name: n.WhichOneof("synchronizer") for n in strategy.node_config}
    assert kinds == {"W:0": "AllReduceSynchronizer", "b:0": "AllReduceSynchronizer",
                     "emb:0": "PSSynchronizer", "loop_w:0": "AllReduceSynchronizer"}
    emb = strategy.node_config[2]
    assert emb.PSSynchronizer.reduction_destination == "10.0.0.2:CPU:0"
    assert emb.PSSynchronizer.sync


def test_groups_count_dense_variables_and_sparse_ones_are_balanced(make_var, two_nodes):
    variables = [make_var("d0", (4,)), make_var("s0", (100, 8), sparse=True),
                 make_var("d1", (4,)), make_var("s1", (300, 8), sparse=True),
                 make_var("d2", (4,)), make_var("s2", (200, 8), sparse=True)]
    nodes = Parallax(chunk_size=2, local_proxy_variable=True, staleness=2).build_from_variables(
        variables, two_nodes).node_config
    dense = [n for n in nodes if n.WhichOneof("synchronizer") == "AllReduceSynchronizer"]
    assert [n.AllReduceSynchronizer.group for n in dense] == [0, 0, 1]
    assert all(n.AllReduceSynchronizer.spec == AR.AUTO for n in dense)
    sparse = {n.var_name: n.PSSynchronizer for n in nodes if n.HasField("PSSynchronizer")}
    assert {k: v.reduction_destination for k, v in sparse.items()} == {
        "s1:0": "10.0.0.2:CPU:0", "s2:0": "10.0.0.1:CPU:0", "s0:0": "10.0.0.1:CPU:1"}
    assert all(v.local_replication and v.sync and v.staleness == 2 for v in sparse.values())


@pytest.mark.parametrize("kwargs, message", [
    ({"chunk_size": 0}, "chunk_size"), ({"staleness": -1}, "staleness"),
    ({"sync": False, "staleness": 1}, "needs sync=True"), ({"local_proxy_variable": "no"},
                                                            "local_proxy_variable"),
], ids=["chunk", "staleness", "async-stale", "proxy"])
def test_bad_arguments_name_parallax(kwargs, message):
    with pytest.raises(ValueError, match="Parallax: .*" + message):
        Parallax(**kwargs)



@pytest.mark.parametrize("spec_name", ["one_cpu", "two_gpus", "two_nodes", "four_servers"])
def test_without_a_sparse_variable_its_plan_is_all_reduces_but_for_the_spec(spec_name, request, make_var):
    """What lets a matrix run Parallax on its sparse models only (tests/dedupe.py): on the others, AllReduce's plan
    (groups across a chunk's end, control flow, unknown shapes included) but for the spec (AUTO, not NCCL), while
    no group reaches AllReduce's bucket size."""
    from dedupe import without_spec
    spec = request.getfixturevalue(spec_name)
    shapes = [(4,), (300, 8), (3, 3, 8, 16), (1,), None, (100, 100)]
    dense = [make_var("v{}".format(i), shapes[i % len(shapes)], control_flow=i % 7 == 0) for i in range(300)]
    parallax, all_reduce = (b.build_from_variables(dense, spec) for b in (Parallax(), AllReduce()))
    assert without_spec(parallax) == without_spec(all_reduce)
    assert {n.AllReduceSynchronizer.spec for n in parallax.node_config} == {AR.AUTO}
    assert {n.AllReduceSynchronizer.spec for n in all_reduce.node_config} == {AR.NCCL}
    sparse = dense + [make_var("s", (100, 8), sparse=True)]
    assert without_spec(Parallax().build_from_variables(sparse, spec)) != without_spec(
        AllReduce().build_from_variables(sparse, spec))
