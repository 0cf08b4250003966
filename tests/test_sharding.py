"""Which tests share a worker under ``pytest -n`` (``sharding.py``): the pools' topologies, the multihost tier."""
import json
import os
import subprocess
import sys
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


def _test_sh(tmp_path, *args, fail_phase=None, **env):
    """The pytest runs ``scripts/test.sh ARGS`` makes, through a stand-in interpreter that records its arguments
    (and fails the ``fail_phase``-th pytest run)."""
    log = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text("#!{}\nimport json, sys\n"
                    "with open({!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
                    "runs = [l for l in open({!r}) if 'pip' not in l]\n"
                    "sys.exit(1 if 'pip' not in sys.argv and len(runs) == {!r} else 0)\n".format(
                        sys.executable, str(log), str(log), fail_phase))
    fake.chmod(0o755)
    done = subprocess.run(["bash", os.path.join(os.path.dirname(TESTS), "scripts", "test.sh")] + list(args),
                          env=dict({k: v for k, v in os.environ.items() if not k.startswith("AUTODIST_TEST_")},
                                   PYTHON=str(fake), AUTODIST_TEST_WORKERS="2", **env),
                          timeout=120, capture_output=True, text=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][:3] == ["-m", "pip", "install"], calls
    return done.returncode, calls[1:]


WORKERS = ["-n", "2", "--dist", "loadgroup"]


def test_the_whole_suite_runs_the_exclusive_tests_last_and_alone(tmp_path):
    """``bash scripts/test.sh``: the link-rate tests are not read beside another worker's TensorFlow."""
    assert _test_sh(tmp_path) == (0, [["-m", "pytest"] + WORKERS + ["-m", "not exclusive"],
                                      ["-m", "pytest", "-m", "exclusive"]])


@pytest.mark.parametrize("phase", [1, 2])
def test_a_failing_phase_fails_the_suite_and_the_other_still_runs(tmp_path, phase):
    status, calls = _test_sh(tmp_path, fail_phase=phase)
    assert status == 1 and len(calls) == 2


def test_arguments_and_the_fast_tier_are_one_run_and_coverage_runs_the_same(tmp_path):
    named = ["tests/kernel", "-k", "ps"]
    assert _test_sh(tmp_path, *named)[1] == [["-m", "pytest"] + WORKERS + named]
    (tmp_path / "calls").unlink()
    fast = ["-m", "not slow and not cluster", "-x"]
    assert _test_sh(tmp_path, "--fast", "-x")[1] == [["-m", "pytest"] + WORKERS + fast]
    (tmp_path / "calls").unlink()
    assert _test_sh(tmp_path, AUTODIST_TEST_RUNNER="coverage run -m pytest")[1] == [
        ["-m", "coverage", "run", "-m", "pytest"] + WORKERS + ["-m", "not exclusive"],
        ["-m", "coverage", "run", "-m", "pytest", "-m", "exclusive"]]
