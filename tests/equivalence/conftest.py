"""The equivalence tests' node pools: long-lived node processes per topology, shared by the whole session.

``pools(topology)`` (``eq_harness.TOPOLOGIES``) starts that topology's nodes on
first use (starting TensorFlow costs seconds per process), so the graph-mode
matrix and the Keras ``fit`` matrix share the two-node pool; every case is a
job of its own, whose resources are dropped when it ends.

A test declares the topology it uses, by a ``topology`` parameter or by
``@pytest.mark.pool("<topology>")``: under ``pytest -n`` the tests of one
topology run on one worker, which alone starts that pool (``tests/sharding.py``);
``pools`` refuses a topology the test did not declare.

A node that dies fails the test it was in with its exit status and the tail of
its output (``eq_harness.NodeDied``; each node writes to ``<address>.log`` in
the pool's temporary directory); the next test to ask for that topology gets a
new pool, so one crash does not fail the tests after it.
"""
import os
import warnings

import pytest

import eq_harness as harness
import sharding

HERE = os.path.dirname(os.path.abspath(__file__))


#: topology -> the open NodePool of this process
_OPEN = {}


def _close_pools():
    while _OPEN:
        _OPEN.popitem()[1].close()


@pytest.fixture(scope="session")
def _pools(tmp_path_factory):
    def get(topology):
        pool = _OPEN.get(topology)
        if pool is None or not pool.alive:   # a pool whose node died (in a case or between two) is started again
            if pool is not None and not pool.closed:   # not seen by a case: said here, not lost
                warnings.warn("the {} pool's node(s) {} ended between two tests; starting its nodes again".format(
                    topology, ", ".join(pool.ended())))
                pool.close()
            nodes = harness.TOPOLOGIES[topology]
            _OPEN[topology] = harness.NodePool(nodes, harness.write_spec(tmp_path_factory.mktemp("pool"), nodes), HERE)
        return _OPEN[topology]

    yield get
    _close_pools()


def pytest_runtest_teardown(item, nextitem):
    """The pools end when this process's tests of the tier do: their nodes (about 1.5 GB each by then) are not
    kept for the rest of a session that no longer needs them (an xdist worker goes on to other tests)."""
    if nextitem is None or not str(nextitem.fspath).startswith(HERE + os.sep):
        _close_pools()


@pytest.fixture
def pools(_pools, request):
    """``pools(topology) -> NodePool``: the session's pool of the topology this test declares (module docstring)."""
    declared = sharding.pool_topology(request.node)

    def get(topology):
        if topology != declared:
            pytest.fail("{} uses the {!r} pool but declares {!r}: give it a 'topology' parameter or "
                        "@pytest.mark.pool({!r}) (tests/sharding.py)".format(request.node.nodeid, topology, declared,
                                                                           topology), pytrace=False)
        return _pools(topology)
    return get
