"""A cluster never calibrated is probed when AutoStrategy first plans for it (issue 14), then read from the cache."""
import dataclasses
import os
import pathlib
import sys

import pytest

from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies import AutoStrategy
from autodist.strategies.cost import first_probe, load_calibration, prior_calibration, save_calibration
from autodist.strategies.cost.calibration import PROBE_VERSION

TWO_NODES = str(pathlib.Path(__file__).resolve().parents[2] / "resource_specs" / "loopback_two_nodes.yml")


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))   # the calibration cache lives under ~/.autodist
    return ResourceSpec(TWO_NODES)


@pytest.fixture
def probes(monkeypatch, spec):
    """Every probe_in_child call, answered with the prior marked as a probe's (and cached, as the child does)."""
    calls = []

    def fake(probed_spec, timeout=first_probe.PROBE_TIMEOUT):
        calls.append(probed_spec.path)
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
    assert said[1].startswith("AutoStrategy: cluster measured in ")
    assert first_probe.calibration_for_planning(spec, say=said.append) == found and len(probes) == 1   # cached


def test_probe_false_plans_with_the_prior(spec, probes):
    assert first_probe.calibration_for_planning(spec, probe=False) == prior_calibration(spec) and probes == []
    assert AutoStrategy(probe=False).job_calibration(spec, may_probe=True) == prior_calibration(spec)
    assert probes == []


def test_only_a_chief_about_to_launch_probes(spec, probes):
    builder = AutoStrategy()
    assert builder.job_calibration(spec) == prior_calibration(spec) and probes == []   # autodist plan, members
    assert builder.calibration(spec) == prior_calibration(spec).rounded() and probes == []
    found = builder.job_calibration(spec, may_probe=True)                              # the chief, launching
    assert probes == [spec.path] and found.source == "probe"


def test_a_failed_probe_falls_back_to_the_prior_and_says_how_to_measure(spec, monkeypatch):
    failures = []

    def fail(probed_spec, timeout=None):
        failures.append(probed_spec)
        raise first_probe.ProbeFailed("exit status 1: no route to 127.0.0.2")

    monkeypatch.setattr(first_probe, "probe_in_child", fail)
    said = []
    assert first_probe.calibration_for_planning(spec, say=said.append) == prior_calibration(spec)
    assert "no route to 127.0.0.2" in said[-1] and "autodist calibrate -r " + TWO_NODES in said[-1]
    builder = AutoStrategy()
    assert builder.job_calibration(spec, may_probe=True) == builder.job_calibration(spec, may_probe=True)
    assert len(failures) == 2   # the builder does not try again at every build


def test_auto_strategy_probes_once_per_cluster(spec, probes, tmp_path):
    builder = AutoStrategy()
    first = builder.job_calibration(spec, may_probe=True)
    os.remove(str(next((tmp_path / ".autodist" / "calibration").iterdir())))   # even without the cache
    assert builder.job_calibration(spec, may_probe=True) == first and len(probes) == 1
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
