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


def test_the_pools_end_when_the_tiers_tests_do(request, monkeypatch):
    """After the last test of the tier in this process (the next one is elsewhere, or none) the pools' nodes go."""
    import os
    import types
    conftest = request.config.pluginmanager.get_plugin(os.path.join(os.path.dirname(__file__), "conftest.py"))
    closed = []
    pool = types.SimpleNamespace(close=lambda: closed.append(1))
    here = types.SimpleNamespace(fspath=__file__)
    elsewhere = types.SimpleNamespace(fspath=os.path.join(os.path.dirname(os.path.dirname(__file__)), "test_api.py"))
    monkeypatch.setattr(conftest, "_OPEN", {"2nodes-1+1": pool})
    conftest.pytest_runtest_teardown(here, here)
    assert closed == [] and conftest._OPEN
    conftest.pytest_runtest_teardown(here, elsewhere)
    assert closed == [1] and not conftest._OPEN
    conftest._OPEN["1node-2replicas"] = pool
    conftest.pytest_runtest_teardown(here, None)
    assert closed == [1, 1] and not conftest._OPEN
