"""The equivalence tier's checks can fail: a node that returns fewer steps or variables than the reference, a test
that uses a pool it did not declare."""
import numpy as np
import pytest

import eq_harness as harness

LOSSES = [np.array([0.5, 0.25]), np.array([0.4, 0.2]), np.array([0.3, 0.1])]
VALUES = [np.ones((2, 3)), np.zeros(3)]


def test_equal_results_pass():
    harness.check((LOSSES, VALUES), [l.copy() for l in LOSSES], [v.copy() for v in VALUES])


@pytest.mark.parametrize("losses,values,message", [
    (LOSSES, VALUES[:1], "variable: 1 of them, the reference has 2"),
    (LOSSES[:2], VALUES, "per-example losses of step: 2 of them, the reference has 3"),
    (LOSSES, VALUES + [np.zeros(1)], "variable: 3 of them, the reference has 2"),
], ids=["a-variable-fewer", "a-step-fewer", "a-variable-more"])
def test_a_node_with_fewer_or_more_results_fails(losses, values, message):
    with pytest.raises(AssertionError, match=message):
        harness.check((LOSSES, VALUES), losses, values)


def test_a_different_value_fails_naming_it():
    with pytest.raises(AssertionError, match="variable 1"):
        harness.check((LOSSES, VALUES), LOSSES, [VALUES[0], VALUES[1] + 1e-3])


@pytest.mark.pool("1node-2replicas")
def test_pools_refuses_a_topology_the_test_did_not_declare(pools):
    """Under ``pytest -n`` a pool lives on the worker of the tests that declare it (tests/sharding.py)."""
    with pytest.raises(pytest.fail.Exception, match="uses the '2nodes-1\\+1' pool but declares '1node-2replicas': "
                                                    "give it a 'topology' parameter or @pytest.mark.pool"):
        pools("2nodes-1+1")
