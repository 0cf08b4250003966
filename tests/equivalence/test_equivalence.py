"""The main oracle: every synchronous strategy trains exactly like one device on the global batch.

8 builders x 6 models, each pair on 2 of the 4 topologies (``cells``: every
builder and every model on every topology; Parallax on the sparse models
only: on the others its plan is AllReduce's, ``tests/dedupe.py``). After STEPS steps,
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


def cells(models, topologies, builders=BUILDERS, per_pair=2):
    """``(builder, model, topology)`` params: every builder on every model (Parallax on the sparse models only),
    each pair on ``per_pair`` of the topologies, chosen so that every builder and every model still meets every
    topology. The i-th builder and the j-th model run on topologies i + j + r * (T / per_pair) mod T, r <
    ``per_pair``: as j goes over consecutive models, at least T / per_pair of them, these take every value mod
    T, and as i goes over the builders, too (the test below checks the matrices' inputs). A builder with fewer
    models (Parallax: the sparse ones) runs each on every topology. ``per_pair=len(topologies)``: the whole
    cross product."""
    count = len(topologies)
    if not 0 < per_pair <= count or count % per_pair:
        raise ValueError("per_pair {} does not divide {} topologies".format(per_pair, count))
    found = []
    for i, builder in enumerate(builders):
        own = [j for j, model in enumerate(models) if builder in builders_for(builders, model in SPARSE_MODELS)]
        offsets = range(count) if len(own) * per_pair < count else range(0, count, count // per_pair)
        found += [(builder, models[j], topologies[(i + j + offset) % count]) for j in own for offset in offsets]
    return [pytest.param(*cell, id="-".join(cell)) for cell in found]


@pytest.mark.parametrize("models,topologies,per_pair", [
    (sorted(MODELS), sorted(TOPOLOGIES), 2), (sorted(MODELS), sorted(TOPOLOGIES), 1), (["linreg", "cnn", "lstm",
     "embedding"], sorted(TOPOLOGIES), 1), (["linreg", "cnn", "keras_embedding"], ["a", "b"], 1)])
def test_cells_put_every_builder_and_every_model_on_every_topology(models, topologies, per_pair):
    found = [param.values for param in cells(models, topologies, per_pair=per_pair)]
    assert len(found) == len(set(found))
    for builder in BUILDERS:
        own = [m for m in models if builder in builders_for(BUILDERS, m in SPARSE_MODELS)]
        assert {b_m for b_m in ((b, m) for b, m, _ in found) if b_m[0] == builder} == {(builder, m) for m in own}
        assert {t for b, _, t in found if b == builder} == set(topologies), builder
        assert all(sum(1 for cell in found if cell[:2] == (builder, m)) >= per_pair for m in own)
    for model in models:
        assert {t for _, m, t in found if m == model} == set(topologies), model
    assert set(found) <= {param.values for param in cells(models, topologies, per_pair=len(topologies))}


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
