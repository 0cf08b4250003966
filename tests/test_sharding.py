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
    (_Item("multihost/test_multihost_jobs.py", ["cluster", "chiefs"]), "multihost-test_multihost_jobs"),
    (_Item("multihost/test_readme_block.py", ["tmp_path"]), "multihost-test_readme_block"),
    (_Item("equivalence/test_equivalence.py", ["pools"], {"topology": "2nodes-2+1"}), "pool-2nodes-2+1"),
    (_Item("equivalence/test_zoo.py", ["pools"], marks={"pool": pytest.mark.pool("1node-2replicas").mark}),
     "pool-1node-2replicas"),
    (_Item("equivalence/test_zoo.py", ["pools"]), "pool-undeclared"),
    (_Item("equivalence/test_eq_checks.py", ["tmp_path"]), None),
    (_Item("job/test_job_ssh.py", ["sshd", "chiefs"]), None),
    (_Item("multihost/test_x.py", ["cluster"], marks={"xdist_group": pytest.mark.xdist_group("own").mark}), None),
], ids=["multihost", "multihost-other-module", "pool-by-parameter", "pool-by-mark", "pool-undeclared", "alone",
        "ssh-alone", "own-group"])
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


WORKERS = ["-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder"]


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


class _Collected:
    """A collected test as ``scheduled_first`` reads it: its id and its xdist group."""

    def __init__(self, nodeid, group=None):
        self.nodeid = nodeid
        self._group = pytest.mark.xdist_group(group).mark if group else None

    def get_closest_marker(self, name):
        return self._group if name == "xdist_group" else None

    def __repr__(self):
        return self.nodeid


def test_the_costliest_scopes_are_scheduled_first_and_a_groups_tests_stay_together():
    durations = {"tests/a.py": (4, 8.0), "tests/slow.py": (1, 300.0), "tests/pool.py": (3, 90.0)}
    items = [_Collected("tests/a.py::t1"), _Collected("tests/pool.py::p1", "pool-x"), _Collected("tests/a.py::t2"),
             _Collected("tests/pool.py::p2", "pool-x"), _Collected("tests/new.py::n"),
             _Collected("tests/pool.py::p3", "pool-x"), _Collected("tests/slow.py::s")]
    order = [item.nodeid for item in sharding.scheduled_first(items, durations)]
    # slow alone 300 s; the pool group 3 x 30 s; a.py 2 s each and the unknown module 1 s, in collection order
    assert order == ["tests/slow.py::s", "tests/pool.py::p1", "tests/pool.py::p2", "tests/pool.py::p3",
                     "tests/a.py::t1", "tests/a.py::t2", "tests/new.py::n"]


def test_without_a_durations_file_the_collection_order_stays(tmp_path):
    items = [_Collected("tests/b.py::x"), _Collected("tests/a.py::y", "g"), _Collected("tests/c.py::z")]
    assert sharding.load_durations(str(tmp_path / "none.json")) == {}
    assert sharding.scheduled_first(items, {}) == items


def test_the_durations_file_lists_the_suites_modules():
    """The committed estimates are the file scripts/durations.py writes, and cover today's costly modules."""
    durations = sharding.load_durations(sharding.DURATIONS)   # the committed file, whatever the environment names
    assert durations and all(tests >= 1 and seconds >= 0 for tests, seconds in durations.values())
    for module in ("tests/multihost/test_readme_block.py", "tests/test_benchmark_paper_table.py",
                   "tests/job/test_job_exits.py"):
        assert module in durations, module


def test_durations_of_a_junit_file_are_per_module(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(TESTS), "scripts"))
    try:
        import durations as script
    finally:
        sys.path.pop(0)
    junit = tmp_path / "run.xml"
    junit.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_sharding" name="a" time="1.25"/>'
                     '<testcase classname="tests.test_sharding" name="b[x]" time="2"/>'
                     '<testcase classname="tests.job.test_job_exits.TestSomething" name="c" time="3"/>'
                     '<testcase classname="nowhere.test_gone" name="d" time="9"/></testsuite></testsuites>')
    modules = script.durations(str(junit))
    assert modules == {"tests/job/test_job_exits.py": [1, 3.0], "tests/test_sharding.py": [2, 3.2]}
    out = tmp_path / "durations.json"
    script.main([str(junit), "--out", str(out)])
    assert {m: tuple(e) for m, e in json.loads(out.read_text())["modules"].items()} == \
        {m: tuple(e) for m, e in modules.items()}


def test_under_xdist_the_workers_take_the_costliest_test_first(tmp_path):
    """The order reaches the workers: collected last, the test its module's estimate makes costliest runs first."""
    cheap = "tests/test_sharding.py::test_a_pool_mark_wins_over_a_topology_parameter"
    costly = "tests/test_tiers.py::test_an_unknown_tier_is_a_usage_error_naming_it"
    estimates = tmp_path / "durations.json"
    estimates.write_text(json.dumps({"modules": {"tests/test_sharding.py": [1, 1.0],
                                                 "tests/test_tiers.py": [1, 60.0]}}))
    env = dict(os.environ, AUTODIST_TEST_DURATIONS=str(estimates))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "-v", "-p", "no:cacheprovider", cheap, costly], cwd=os.path.dirname(TESTS), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    ran = [nodeid for line in done.stdout.splitlines() if "PASSED" in line
           for nodeid in (costly, cheap) if nodeid in line]
    assert ran == [costly, cheap], done.stdout[-3000:]
