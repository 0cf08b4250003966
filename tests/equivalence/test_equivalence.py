"""The main oracle: every synchronous strategy trains exactly like one device on the global batch.

8 builders x 5 models x 3 topologies. After STEPS steps, the per-example
losses of every step (all replicas of all nodes, in batch order) and the
final variables on every node equal the single-device run's, within float
tolerance.
"""
import functools
import itertools
import os
import uuid

import pytest
import yaml

import eq_harness as harness
from eq_models import GLOBAL_BATCH, MODELS

BUILDERS = ["PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax"]
HERE = os.path.dirname(os.path.abspath(__file__))

# topology -> [(address, number of CPU replicas)], chief first
TOPOLOGIES = {
    "1node-2replicas": [("127.0.0.1", 2)],
    "2nodes-1+1": [("127.0.0.1", 1), ("127.0.0.2", 1)],
    "2nodes-2+1": [("127.0.0.1", 2), ("127.0.0.2", 1)],
}
_keys = itertools.count(1)


def _spec(tmp_path_factory, topology):
    nodes = [{"address": a, "cpus": list(range(c))} for a, c in TOPOLOGIES[topology]]
    if len(nodes) > 1:
        nodes[0]["chief"] = True
    path = tmp_path_factory.mktemp("spec") / "{}.yml".format(topology)
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return str(path)


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    created = {}

    def get(topology):
        if topology not in created:
            created[topology] = harness.NodePool(TOPOLOGIES[topology], _spec(tmp_path_factory, topology), HERE)
        return created[topology]

    yield get
    for pool in created.values():
        pool.close()


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


@pytest.mark.slow
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("builder", BUILDERS)
def test_equivalent_to_single_device(builder, model, topology, pools, tmp_path):
    pool = pools(topology)
    case = {"model": model, "builder": builder, "job_id": "eq-" + uuid.uuid4().hex[:12],
            "strategy_path": str(tmp_path / "strategy.pb"), "key_base": next(_keys) * 100000}
    results = pool.run(case, _rows(topology))
    losses = [sum((list(node[0][step]) for node in results), []) for step in range(harness.STEPS)]
    reference = _reference(model)
    for node_losses, node_values in results:
        harness.check(reference, losses, node_values)


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_auto_strategy_equivalent_to_single_device(model, pools, tmp_path):
    """AutoStrategy's plan (whichever candidate it picks) trains like one device, as every builder does."""
    test_equivalent_to_single_device("AutoStrategy", model, "2nodes-2+1", pools, tmp_path)
