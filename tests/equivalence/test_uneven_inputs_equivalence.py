"""Uneven inputs on two nodes: node 1 has three batches fewer than node 0, under every synchronous builder.

``uneven_inputs="end"``: every node's session raises OutOfRangeError at node 1's
end, and the variables equal one device trained on the rows both nodes held
until then (on 1+1 replicas for every builder, on 2+1 for AllReduce and PS: a
node of two replicas reads two batches a step and runs out within a step). ``"join"``: node 0 goes on alone (its last batch partial), then both
end together; the variables equal one device trained on the rows each step
actually held. No case hangs: a node that waited would fail the pool's timeout.
"""
import functools

import pytest

import eq_harness as harness
import eq_uneven as uneven
from test_equivalence import BUILDERS

pytestmark = pytest.mark.slow
CASES = [(builder, "2nodes-1+1") for builder in BUILDERS] + [("AllReduce", "2nodes-2+1"), ("PS", "2nodes-2+1")]


@functools.lru_cache(maxsize=None)
def _reference(policy, topology):
    return uneven.reference(policy, dict(harness.TOPOLOGIES[topology]))


@pytest.mark.parametrize("policy", ["end", "join"])
@pytest.mark.parametrize("builder, topology", CASES)
def test_uneven_inputs_end_together_and_equal_one_device(builder, topology, policy, pools, tmp_path):
    case = harness.new_case(builder, None, tmp_path, module="eq_uneven", policy=policy)
    steps, values = _reference(policy, topology)
    results = pools(topology).run(case, {a: None for a in uneven.ROWS})
    assert [node_steps for node_steps, _ in results] == [steps, steps]
    for _, node_values in results:
        harness.assert_all_close(node_values, values, "variable")
