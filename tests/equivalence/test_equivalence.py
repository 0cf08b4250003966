"""The main oracle: every synchronous strategy trains exactly like one device on the global batch.

8 builders x 6 models x 3 topologies (Parallax on the sparse models only: on
the others its plan is AllReduce's, ``tests/dedupe.py``). After STEPS steps,
the per-example losses of every step (all replicas of all nodes, in batch
order) and the final variables on every node equal the single-device run's,
within float tolerance.
"""
import functools
import re

import pytest

import eq_harness as harness
from dedupe import builders_for
from eq_models import GLOBAL_BATCH, MODELS, SPARSE_MODELS

BUILDERS = ["PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax"]
TOPOLOGIES = harness.TOPOLOGIES


@functools.lru_cache(maxsize=None)
def _reference(model):
    return harness.reference(model)


def _rows(topology):
    """Each node's rows of the global batch: as many per replica, in node order."""
    per_replica = GLOBAL_BATCH // sum(c for _, c in TOPOLOGIES[topology])
    rows, start = {}, 0
    for address, count in TOPOLOGIES[topology]:
        rows[address] = slice(start, start + per_replica * count)
        start += per_replica * count
    return rows


def cells(models, topologies, builders=BUILDERS):
    """``(builder, model, topology)`` params: every builder on every model and topology, Parallax on the sparse
    models only."""
    return [pytest.param(builder, model, topology, id="{}-{}-{}".format(builder, model, topology))
            for builder in builders for model in models for topology in topologies
            if builder in builders_for(builders, model in SPARSE_MODELS)]


@pytest.mark.slow
@pytest.mark.parametrize("builder,model,topology", cells(sorted(MODELS), sorted(TOPOLOGIES)))
def test_equivalent_to_single_device(builder, model, topology, pools, tmp_path):
    pool = pools(topology)
    case = harness.new_case(builder, model, tmp_path)
    results = pool.run(case, _rows(topology))
    losses = [sum((list(node[0][step]) for node in results), []) for step in range(harness.STEPS)]
    reference = _reference(model)
    for node_losses, node_values in results:
        harness.check(reference, losses, node_values)


@pytest.mark.slow
@pytest.mark.pool("2nodes-2+1")
@pytest.mark.parametrize("model", sorted(MODELS))
def test_auto_strategy_equivalent_to_single_device(model, pools, tmp_path):
    """AutoStrategy's plan (whichever candidate it picks) trains like one device, as every builder does."""
    test_equivalent_to_single_device("AutoStrategy", model, "2nodes-2+1", pools, tmp_path)


#: Parameter-server bytes and the servers' work cost everything, collectives more: on 2nodes-1+1
#: AutoStrategy's search then leaves all-reduce for parameter servers (a "searched" plan, past the margin).
#: With a replica's compute of 1 s it balances the two servers by splitting the cnn's two kernels (the
#: wait for the other node's compute hides under their transfers); with 10 s the wait is the larger, and
#: every variable gets a local proxy on the node that does not hold it (the chief refreshes them all).
_RPC_BOUND = dict(rpc_latency_s=0.0, rpc_bandwidth=1e3, rpc_duplex=1.0, collective_latency_s=1.0,
                  collective_bandwidth=1.0, local_bandwidth=1e12, update_bytes_per_s=1e3,
                  sparse_update_bytes_per_s=1e12, fixed_step_s=0.0, round_trip_s=0.0, ps_step_s=0.0, overlap=0.0,
                  flops=1e9)
_ALL_CNN = {"conv2d/kernel", "conv2d/bias", "dense/kernel", "dense/bias"}


@pytest.mark.slow
@pytest.mark.pool("2nodes-1+1")
@pytest.mark.parametrize("compute_s,split_names,proxied_names", [
    (1.0, {"conv2d/kernel", "dense/kernel"}, set()),
    (10.0, set(), _ALL_CNN),
], ids=["split", "proxied"])
def test_searched_plan_equivalent_to_single_device(compute_s, split_names, proxied_names, pools, tmp_path):
    from autodist.plan.contract import read_entries
    from autodist.strategies.base import Strategy
    from autodist.strategies.cost import Calibration, Compute
    topology = "2nodes-1+1"
    case = harness.new_case("AutoStrategy", "cnn", tmp_path,
                            kwargs={"calibration": Calibration(**_RPC_BOUND), "compute": Compute(compute_s)})
    results = pools(topology).run(case, _rows(topology))
    entries = read_entries(Strategy.deserialize(path=case["strategy_path"])).variables
    split = {name for name, entry in entries.items() if entry.partition is not None}
    proxied = {name for name, entry in entries.items() if entry.partition is None and entry.synchronizer.proxy}
    # the pool's processes outlive a test: Keras numbers the layers of the cnn's one Conv2D and one Dense
    # by how many came before (conv2d_8), so the layer's suffix is not part of the claim
    assert {re.sub(r"_\d+/", "/", name) for name in split} == split_names and len(split) == len(split_names)
    assert {re.sub(r"_\d+/", "/", name) for name in proxied} == proxied_names and len(proxied) == len(proxied_names)
    losses = [sum((list(node[0][step]) for node in results), []) for step in range(harness.STEPS)]
    for node_losses, node_values in results:
        harness.check(_reference("cnn"), losses, node_values)
