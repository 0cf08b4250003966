"""A cluster never calibrated is probed when AutoStrategy first plans for it (issue 14), then read from the cache."""
import dataclasses
import os
import pathlib
import sys
import time

import pytest

from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies import AutoStrategy
from autodist.runtime.calibrate import first_probe
from autodist.strategies.cost import load_calibration, prior_calibration, save_calibration
from autodist.strategies.cost.calibration import PROBE_VERSION
from process_state import alive

TWO_NODES = str(pathlib.Path(__file__).resolve().parents[3] / "resource_specs" / "loopback_two_nodes.yml")


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))   # the calibration cache lives under ~/.autodist
    return ResourceSpec(TWO_NODES)


@pytest.fixture
def probes(monkeypatch, spec):
    """Every probe_in_child call, answered with the prior marked as a probe's (and cached, as the child does)."""
    calls = []

    def fake(probed_spec, timeout=first_probe.PROBE_TIMEOUT, relay=None):
        calls.append(probed_spec.path)
        if relay is not None:
            relay("calibrate 1/1: a 16 MiB update")
        found = dataclasses.replace(prior_calibration(probed_spec), source="probe", rpc_bandwidth=123e6,
                                    probe_version=PROBE_VERSION)
        save_calibration(probed_spec, found)
        return found

    monkeypatch.setattr(first_probe, "probe_in_child", fake)
    return calls


def test_a_cached_calibration_is_used_without_probing(spec, probes):
    cached = dataclasses.replace(prior_calibration(spec), source="probe", rpc_bandwidth=7e8,
                                 probe_version=PROBE_VERSION)
    save_calibration(spec, cached)
    assert first_probe.calibration_for_planning(spec) == cached and probes == []


def test_without_a_cache_the_cluster_is_probed_once_and_says_so(spec, probes):
    said = []
    found = first_probe.calibration_for_planning(spec, say=said.append)
    assert probes == [TWO_NODES] and found.source == "probe" and found.rpc_bandwidth == 123e6
    assert "measuring the cluster of " + TWO_NODES in said[0] and "autodist calibrate" in said[0]
    assert said[1] == "AutoStrategy: calibrate 1/1: a 16 MiB update"   # the probe's progress, relayed
    assert said[2].startswith("AutoStrategy: cluster measured in ")
    assert first_probe.calibration_for_planning(spec, say=said.append) == found and len(probes) == 1   # cached


def test_probe_false_plans_with_the_prior(spec, probes):
    assert first_probe.calibration_for_planning(spec, probe=False) == prior_calibration(spec) and probes == []
    measure = first_probe.calibration_for_planning
    assert AutoStrategy(probe=False).job_calibration(spec, measure=measure) == prior_calibration(spec)
    assert probes == []


def test_only_a_chief_about_to_launch_probes(spec, probes):
    builder = AutoStrategy()
    assert builder.job_calibration(spec) == prior_calibration(spec) and probes == []   # autodist plan, members
    assert builder.calibration(spec) == prior_calibration(spec).rounded() and probes == []
    found = builder.job_calibration(spec, measure=first_probe.calibration_for_planning)   # the chief, launching
    assert probes == [spec.path] and found.source == "probe"


def test_a_failed_probe_falls_back_to_the_prior_and_says_how_to_measure(spec, monkeypatch):
    failures = []

    def fail(probed_spec, timeout=None, relay=None):
        failures.append(probed_spec)
        raise first_probe.ProbeFailed("exit status 1: no route to 127.0.0.2")

    monkeypatch.setattr(first_probe, "probe_in_child", fail)
    said = []
    assert first_probe.calibration_for_planning(spec, say=said.append) == prior_calibration(spec)
    assert "no route to 127.0.0.2" in said[-1] and "autodist calibrate -r " + TWO_NODES in said[-1]
    builder = AutoStrategy()
    measure = first_probe.calibration_for_planning
    assert builder.job_calibration(spec, measure=measure) == builder.job_calibration(spec, measure=measure)
    assert len(failures) == 2   # the builder does not try again at every build


def test_the_probe_of_a_larger_cluster_gets_a_larger_bound(spec, monkeypatch):
    """300 s up to five nodes, 60 s a node beyond: 8 emulated hosts ran past 300 s and planned with the prior."""
    nodes = [{"address": "127.0.0.{}".format(i + 1)} for i in range(8)]
    nodes[0]["chief"] = True
    eight = ResourceSpec.from_dict({"nodes": nodes})
    assert first_probe.probe_timeout(spec) == first_probe.PROBE_TIMEOUT == 300.0
    assert first_probe.probe_timeout(eight) == 480.0
    for count, bound in ((5, 300.0), (6, 360.0)):
        assert first_probe.probe_timeout(ResourceSpec.from_dict({"nodes": nodes[:count]})) == bound
    bounds = []

    def fail(probed_spec, timeout=None, relay=None):
        bounds.append(timeout)
        raise first_probe.ProbeFailed("it ran longer than {:.0f} s".format(timeout))

    monkeypatch.setattr(first_probe, "probe_in_child", fail)
    said = []
    assert first_probe.calibration_for_planning(eight, say=said.append) == prior_calibration(eight)
    assert bounds == [480.0] and "it ran longer than 480 s" in said[-1]


def test_auto_strategy_probes_once_per_cluster(spec, probes, tmp_path):
    builder = AutoStrategy()
    first = builder.job_calibration(spec, measure=first_probe.calibration_for_planning)
    os.remove(str(next((tmp_path / ".autodist" / "calibration").iterdir())))   # even without the cache
    assert builder.job_calibration(spec, measure=first_probe.calibration_for_planning) == first and len(probes) == 1
    assert builder.calibration(spec) == first.rounded()


def test_the_child_probes_the_spec_as_it_is_here_not_its_file(spec, monkeypatch):
    import yaml
    seen = []

    def argv(path):
        with open(path) as handle:
            seen.append(yaml.safe_load(handle))
        return [sys.executable, "-c", "import sys; sys.exit(2)"]

    monkeypatch.setattr(first_probe, "_calibrate_argv", argv)
    shrunk = ResourceSpec.from_dict({"nodes": [spec.to_dict()["nodes"][0]]}, path=spec.path)   # as a shrink keeps it
    with pytest.raises(first_probe.ProbeFailed, match="exit status 2"):
        first_probe.probe_in_child(shrunk)
    assert seen == [shrunk.to_dict()] and len(seen[0]["nodes"]) == 1


def test_a_probe_that_runs_too_long_is_stopped(spec, monkeypatch):
    import subprocess
    children = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            children.append(self)

    monkeypatch.setattr(first_probe.subprocess, "Popen", Recorded)
    monkeypatch.setattr(first_probe, "_calibrate_argv", lambda path: [
        sys.executable, "-c", "import sys, time; sys.stderr.write('waiting for 127.0.0.2\\n'); sys.stderr.flush(); "
                              "time.sleep(60)"])
    with pytest.raises(first_probe.ProbeFailed, match="longer than 1 s; its last line: waiting for 127.0.0.2"):
        first_probe.probe_in_child(spec, timeout=1.0)
    assert len(children) == 1 and children[0].returncode is not None   # stopped and reaped


def test_the_probes_progress_lines_are_relayed_as_they_come_and_its_calibration_read(spec, monkeypatch):
    """Before: the chief waited silently for the whole probe (268 s on 4 emulated hosts at 105 Mbit/s)."""
    import json
    found = dataclasses.replace(prior_calibration(spec), source="probe", rpc_bandwidth=5e7,
                                probe_version=PROBE_VERSION)
    script = ("import sys, time\n"
              "for i, what in enumerate(['16 MiB from the last node', 'every pair of nodes link']):\n"
              "    sys.stderr.write('[autodist] calibrate {}/2: {}\\n'.format(i + 1, what)); sys.stderr.flush()\n"
              "    sys.stderr.write('[127.0.0.2] a node line\\n'); sys.stderr.flush(); time.sleep(0.2)\n"
              "print(sys.argv[1])\n")
    monkeypatch.setattr(first_probe, "_calibrate_argv", lambda path: [
        sys.executable, "-c", script, json.dumps({"calibration": found.to_dict()})])
    relayed = []
    started = time.monotonic()

    def relay(line):
        relayed.append((line, time.monotonic() - started))
    assert first_probe.probe_in_child(spec, relay=relay) == found
    assert [line for line, _ in relayed] == ["calibrate 1/2: 16 MiB from the last node",
                                             "calibrate 2/2: every pair of nodes link"]
    assert relayed[0][1] < relayed[1][1]   # each as it came, not all at the end


def test_a_probe_that_fails_names_its_last_line(spec, monkeypatch):
    monkeypatch.setattr(first_probe, "_calibrate_argv", lambda path: [
        sys.executable, "-c", "import sys; sys.stderr.write('noise\\nerror: 127.0.0.2 refused\\n'); sys.exit(3)"])
    with pytest.raises(first_probe.ProbeFailed, match="exit status 3: error: 127.0.0.2 refused"):
        first_probe.probe_in_child(spec)


@pytest.mark.slow
def test_a_spec_without_a_file_is_probed_from_a_copy(spec, tmp_path):
    in_memory = ResourceSpec.from_dict(spec.to_dict())
    found = first_probe.probe_in_child(in_memory)
    assert found.source == "probe" and found.rpc_bandwidth > 0
    assert load_calibration(spec) == found   # the child cached it under the same key


_ARMED_CHILD = """
import os, sys, time
from autodist.runtime.calibrate.first_probe import stop_with_parent
print("armed" if stop_with_parent(int(sys.argv[1])) else "parent gone", flush=True)
time.sleep(60)
"""

_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(__import__("os").getpid())],
                         stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""

_PROBING_PARENT = """
import os, sys
from autodist.spec.resource_spec import ResourceSpec
from autodist.runtime.calibrate.first_probe import probe_in_child
probe_in_child(ResourceSpec(sys.argv[1]))
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")


@linux_only
def test_the_probe_child_ends_with_the_chief_that_started_it_and_not_before():
    import signal
    import subprocess
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _ARMED_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        child_pid, state = parent.stdout.readline().split()
        assert state == "armed"
        os.kill(int(child_pid), first_probe._PARENT_GONE)   # not from the kernel: the parent lives on
        assert not _gone([int(child_pid)], timeout=1.0), "a stray signal stopped the probe"
        os.kill(parent.pid, signal.SIGKILL)   # the chief dies without a chance to stop its probe
        parent.wait(timeout=30)
        assert _gone([int(child_pid)], timeout=30.0)
    finally:
        parent.kill()
        parent.wait(timeout=30)


@pytest.mark.slow
@linux_only
def test_a_chief_killed_mid_probe_leaves_no_probe_process(tmp_path):
    import signal
    import subprocess
    env = dict(os.environ, HOME=str(tmp_path))   # no calibration cache, no job directories of others
    parent = subprocess.Popen([sys.executable, "-c", _PROBING_PARENT, TWO_NODES], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # the probe's other node runs the protocol script: the probe is under way once it exists
        deadline = time.monotonic() + 120
        probe = []
        while time.monotonic() < deadline and not any("autodist.runtime.calibrate.protocol" in _cmdline(p)
                                                       for p in probe):
            probe = _descendants(parent.pid)
            time.sleep(0.1)
        assert any("autodist.runtime.calibrate.protocol" in _cmdline(p) for p in probe), "the probe never started"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        # stopped, not run to its end (about 15 s more here): SIGTERM to every process and their exits
        assert _gone(probe, timeout=8.0), [_cmdline(p) for p in probe if alive(p)]
        assert os.listdir(tmp_path / ".autodist" / "jobs") == [], "the probe's job directory is removed"
    finally:
        parent.kill()
        parent.wait(timeout=30)
        for pid in _descendants(parent.pid):
            os.kill(pid, signal.SIGKILL)


def _descendants(root):
    """Pids of the live processes below ``root`` (Linux /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/{}/stat".format(entry)) as handle:
                    children.setdefault(int(handle.read().split(")")[-1].split()[1]), []).append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _cmdline(pid):
    try:
        with open("/proc/{}/cmdline".format(pid), "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


@linux_only
def test_a_probe_child_whose_parent_is_gone_does_not_probe(spec):
    import subprocess
    # a pid that is nobody's parent any more: a child of this test, ended and reaped
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(timeout=60)
    # in a child (arming changes the process that arms)
    done = subprocess.run([sys.executable, "-m", "autodist", "calibrate", "-r", TWO_NODES, "--stop-with-parent",
                           str(ended.pid)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 1 and "(pid {}) has ended; not probing".format(ended.pid) in done.stderr, done.stderr
    assert load_calibration(spec) is None


def test_the_probe_child_is_told_who_its_parent_is(tmp_path):
    argv = first_probe._calibrate_argv(str(tmp_path / "spec.yml"))
    assert argv[-2:] == ["--stop-with-parent", str(os.getpid())]
