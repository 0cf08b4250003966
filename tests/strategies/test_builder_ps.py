"""PS and PSLoadBalancing: which variable goes to which server, and the checked arguments."""
import pytest

from autodist.strategies import PS, PSLoadBalancing
from autodist.strategies.report import plan_report


def destinations(strategy):
    return [n.PSSynchronizer.reduction_destination for n in strategy.node_config]


def test_ps_puts_everything_on_the_first_nodes_cpu0(graph_item, two_nodes):
    strategy = PS().build(graph_item, two_nodes)
    assert [n.var_name for n in strategy.node_config] == ["W:0", "b:0", "emb:0", "loop_w:0"]
    assert destinations(strategy) == ["10.0.0.2:CPU:0"] * 4
    assert all(not n.partitioner and not n.part_config for n in strategy.node_config)
    assert list(strategy.graph_config.replicas) == ["10.0.0.2:GPU:0", "10.0.0.2:GPU:1",
                                                    "10.0.0.1:CPU:0", "10.0.0.1:CPU:1"]


@pytest.mark.parametrize("kwargs", [
    {}, {"local_proxy_variable": True}, {"sync": False}, {"staleness": 3},
], ids=["default", "proxy", "async", "stale"])
def test_synchronizer_settings_reach_every_node(make_var, two_nodes, kwargs):
    settings = {"local_proxy_variable": False, "sync": True, "staleness": 0, **kwargs}
    variables = [make_var("a", (8,)), make_var("b", (4, 4), sparse=True)]
    for builder in (PS(**kwargs), PSLoadBalancing(**kwargs)):
        for node in builder.build_from_variables(variables, two_nodes).node_config:
            sync = node.PSSynchronizer
            assert (sync.local_replication, sync.sync, sync.staleness) == (
                settings["local_proxy_variable"], settings["sync"], settings["staleness"])


def test_load_balancing_places_largest_first(make_var, make_spec):
    spec = make_spec([("127.0.0.1", (), (0, 1))])
    # graph order would give 10->s0, 30->s1, 20->s0, 20->s0 (tie): loads 50/30, λ = 1.25
    variables = [make_var("v0", (10,)), make_var("v1", (30,)), make_var("v2", (20,)),
                 make_var("v3", (20,))]
    strategy = PSLoadBalancing().build_from_variables(variables, spec)
    assert destinations(strategy) == ["127.0.0.1:CPU:0", "127.0.0.1:CPU:0",
                                      "127.0.0.1:CPU:1", "127.0.0.1:CPU:1"]
    report = plan_report(strategy, variables, spec)
    assert {d.device: d.held_bytes for d in report.devices if "server" in d.roles} == {"127.0.0.1:CPU:0": 160,
                                                                                     "127.0.0.1:CPU:1": 160}
    assert report.imbalance == 1.0


def test_load_balancing_uses_every_cpu_device_with_ties_to_spec_order(make_var, two_nodes):
    variables = [make_var("v{}".format(i), (16,)) for i in range(4)]
    strategy = PSLoadBalancing().build_from_variables(variables, two_nodes)
    assert destinations(strategy) == ["10.0.0.2:CPU:0", "10.0.0.1:CPU:0", "10.0.0.1:CPU:1",
                                      "10.0.0.2:CPU:0"]


def test_load_balancing_never_partitions(make_var, four_servers):
    variables = [make_var("emb", (1 << 20, 64), sparse=True), make_var("w", (8,))]
    strategy = PSLoadBalancing().build_from_variables(variables, four_servers)
    assert all(not n.partitioner for n in strategy.node_config)
    assert plan_report(strategy, variables, four_servers).imbalance > 3.9


def test_the_real_graph(graph_item, two_nodes):
    strategy = PSLoadBalancing().build(graph_item, two_nodes)
    # sizes: W 48, b 12, emb 160, loop_w 36 -> emb, W, loop_w, b onto s0, s1, s2, s2
    assert destinations(strategy) == ["10.0.0.1:CPU:0", "10.0.0.1:CPU:1", "10.0.0.2:CPU:0",
                                      "10.0.0.1:CPU:1"]


def test_inputs_are_not_changed_and_results_repeat(make_var, two_nodes):
    variables = [make_var("v{}".format(i), (i + 1, 3)) for i in range(50)]
    snapshot = list(variables)
    first = PSLoadBalancing().build_from_variables(variables, two_nodes)
    assert variables == snapshot
    assert PSLoadBalancing().build_from_variables(variables, two_nodes) == first


def test_no_variables(two_nodes):
    strategy = PSLoadBalancing().build_from_variables([], two_nodes)
    assert len(strategy.node_config) == 0 and len(strategy.graph_config.replicas) == 4


@pytest.mark.parametrize("cls", [PS, PSLoadBalancing])
@pytest.mark.parametrize("kwargs, message", [
    ({"staleness": -1}, "staleness must be an integer >= 0"),
    ({"staleness": 1.5}, "staleness must be an integer >= 0"),
    ({"staleness": 2, "sync": False}, "staleness=2 .* needs sync=True"),
    ({"sync": "yes"}, "sync must be True or False"),
    ({"local_proxy_variable": 1}, "local_proxy_variable must be True or False"),
], ids=["negative", "float", "async-stale", "sync-str", "proxy-int"])
def test_bad_arguments(cls, kwargs, message):
    with pytest.raises(ValueError, match="{}: {}".format(cls.__name__, message)):
        cls(**kwargs)
