"""Gradient accumulation with asynchronous and stale parameter servers (``eq_accumulation_async``).

Each node accumulates ``K`` micro-steps and applies its own mean at every K-th call, unsynchronized
with the other nodes (``docs/large_batches.md``): the weights are the sum of every node's updates and
a node's global step counts its applied updates, not its calls, on two loopback nodes.
"""
import numpy as np
import pytest

import eq_accumulation_async as accumulation
import eq_harness as harness
from test_equivalence import _rows

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("topology", ["2nodes-1+1"])
@pytest.mark.parametrize("kwargs", [{"sync": False}, {"staleness": 1}], ids=["async", "stale"])
def test_accumulated_updates_of_every_node_reach_the_servers(kwargs, topology, pools, tmp_path):
    rows = _rows(topology)
    per_node = [rows[address] for address, _ in harness.TOPOLOGIES[topology]]
    w, updates = accumulation.expected(per_node)
    case = harness.new_case("PS", None, tmp_path, module="eq_accumulation_async", kwargs=kwargs,
                            accumulation_steps=accumulation.K, w=w)
    for node_w, node_step in pools(topology).run(case, rows):
        assert node_step == updates
        np.testing.assert_allclose(node_w, w, rtol=1e-5, atol=1e-6)
