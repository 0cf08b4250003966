"""Each node's link rate: the pairs the probe times and node rates (``runtime.calibrate.links``), the model per node."""
import dataclasses

import pytest

from autodist.strategies import PS, AllReduce
from autodist.strategies.cost import Compute, predict, prior_calibration
from autodist.runtime.calibrate.links import link_pairs, node_rates
from autodist.strategies.cost.calibration import node_bandwidth
from autodist.strategies.cost.model import node_comm_s
from autodist.strategies.cost.traffic import step_traffic

from strategy_inputs_for_tests import _spec_from, _var
from test_cost_model import _calibration

A, B, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"


def test_every_pair_up_to_four_nodes_then_the_chiefs_and_a_ring():
    assert link_pairs(3) == [(0, 1), (0, 2), (1, 2)]
    assert len(link_pairs(4)) == 6
    assert link_pairs(8) == [(0, k) for k in range(1, 8)] + [(k, k + 1) for k in range(1, 7)]   # 13, not 28
    assert link_pairs(10) == [(0, k) for k in range(1, 10)] + [(k, k + 1) for k in range(1, 9)]


def test_a_node_runs_at_its_fastest_pair():
    # a path runs at its slower end: node 2 is slow, the chief and node 1 are not
    assert node_rates({(0, 1): 100.0, (0, 2): 10.0, (1, 2): 10.0}, 3) == [100.0, 100.0, 10.0]
    # the chief slow: the pair of the other two shows theirs
    assert node_rates({(0, 1): 10.0, (0, 2): 10.0, (1, 2): 100.0}, 3) == [10.0, 100.0, 100.0]
    assert node_rates({(0, 1): 50.0}, 2) == [50.0, 50.0]   # two nodes: both get their path's


def test_a_transport_scales_by_the_nodes_link_over_the_path_it_was_measured_on():
    calibration = _calibration(link_bandwidth={A: 100.0, B: 100.0, C: 10.0},
                               link_reference={"rpc": 10.0, "collective": 10.0})
    assert node_bandwidth(calibration, A, 50.0, "rpc") == 500.0
    assert node_bandwidth(calibration, C, 50.0, "collective") == 50.0
    assert node_bandwidth(_calibration(), A, 50.0, "rpc") == 50.0   # no link rates (an older probe): as measured
    assert node_bandwidth(calibration, "10.0.0.9", 50.0, "rpc") == 50.0


def test_the_prior_gives_each_node_its_specs_bandwidth():
    from autodist.spec.resource_spec import ResourceSpec
    spec = ResourceSpec.from_dict({"nodes": [{"address": A, "chief": True, "network_bandwidth": 10},
                                             {"address": B, "ssh_config": "lab", "network_bandwidth": 10},
                                             {"address": C, "ssh_config": "lab", "network_bandwidth": 1}],
                                   "ssh": {"lab": {"username": "u"}}})
    prior = prior_calibration(spec)
    assert prior.link_bandwidth == {A: 1.25e9, B: 1.25e9, C: 1.25e8}
    assert prior.link_reference == {"rpc": 1.25e8, "collective": 1.25e8}
    assert prior.rpc_bandwidth == 1.25e8   # the slowest node's, as before; the fast nodes scale it up


def test_every_plan_is_priced_at_the_slow_nodes_link():
    """A third node at a tenth of the others' link: it is every plan's bottleneck, at its own rate."""
    spec = _spec_from([(A, (), (0,)), (B, (), (0,)), (C, (), (0,))])
    w = _var("W", [1000, 1000])   # 4 MB
    slow = _calibration(rpc_bandwidth=1e7, collective_bandwidth=1e7, rpc_latency_s=0.0, collective_latency_s=0.0,
                        local_bandwidth=1e12, update_bytes_per_s=1e12, ps_step_s=0.0, round_trip_s=0.0,
                        link_bandwidth={A: 1e8, B: 1e8, C: 1e7}, link_reference={"rpc": 1e7, "collective": 1e7})
    alike = dataclasses.replace(slow, rpc_bandwidth=1e8, collective_bandwidth=1e8,
                                link_bandwidth={A: 1e8, B: 1e8, C: 1e8}, link_reference={"rpc": 1e8, "collective": 1e8})
    ps, ar = (b.build_from_variables([w], spec) for b in (PS(), AllReduce()))
    for strategy, c_bytes in ((ps, 2 * 4e6), (ar, 4 / 3 * 4e6)):   # C pulls, then pushes / a ring's hops
        assert predict(strategy, [w], Compute(0.0), alike, chief=A).step_s < \
            predict(strategy, [w], Compute(0.0), slow, chief=A).step_s
        prediction = predict(strategy, [w], Compute(0.0), slow, chief=A)
        assert prediction.bottleneck == C
        assert node_comm_s(step_traffic(strategy, [w]), C, slow) == pytest.approx(c_bytes / 1e7)
