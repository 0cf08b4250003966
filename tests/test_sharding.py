"""Which tests share a worker under ``pytest -n`` (``sharding.py``): the pools' topologies, the multihost tier."""
import os
import types

import pytest

import sharding

TESTS = os.path.dirname(os.path.abspath(__file__))


class _Item:
    """What ``group_of`` reads of a collected test."""

    def __init__(self, path, fixtures=(), params=None, marks=None):
        self.fspath = os.path.join(TESTS, path)
        self.fixturenames = list(fixtures)
        if params is not None:
            self.callspec = types.SimpleNamespace(params=params)
        self._marks = marks or {}

    def get_closest_marker(self, name):
        return self._marks.get(name)


@pytest.mark.parametrize("item,group", [
    (_Item("multihost/test_multihost_jobs.py", ["cluster", "chiefs"]), "multihost"),
    (_Item("equivalence/test_equivalence.py", ["pools"], {"topology": "2nodes-2+1"}), "pool-2nodes-2+1"),
    (_Item("equivalence/test_zoo.py", ["pools"], marks={"pool": pytest.mark.pool("1node-2replicas").mark}),
     "pool-1node-2replicas"),
    (_Item("equivalence/test_zoo.py", ["pools"]), "pool-undeclared"),
    (_Item("equivalence/test_eq_checks.py", ["tmp_path"]), None),
    (_Item("job/test_job_ssh.py", ["sshd", "chiefs"]), None),
    (_Item("multihost/test_x.py", ["cluster"], marks={"xdist_group": pytest.mark.xdist_group("own").mark}), None),
], ids=["multihost", "pool-by-parameter", "pool-by-mark", "pool-undeclared", "alone", "ssh-alone", "own-group"])
def test_group_of(item, group):
    assert sharding.group_of(item) == group


def test_a_pool_mark_wins_over_a_topology_parameter():
    item = _Item("equivalence/x.py", ["pools"], {"topology": "2nodes-1+1"}, {"pool": pytest.mark.pool("a").mark})
    assert sharding.pool_topology(item) == "a"


def test_under_xdist_a_pool_test_is_scheduled_with_its_group(tmp_path):
    """The groups are given before xdist turns them into scheduling scopes (a hook that ran after it gave none)."""
    import subprocess
    import sys
    test = "tests/equivalence/test_eq_checks.py::test_pools_refuses_a_topology_the_test_did_not_declare"
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider", test], cwd=os.path.dirname(TESTS), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and test + "@pool-1node-2replicas" in done.stdout, done.stdout[-3000:]
