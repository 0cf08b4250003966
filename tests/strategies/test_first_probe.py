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
    assert AutoStrategy(probe=False).job_calibration(spec) == prior_calibration(spec) and probes == []


def test_a_failed_probe_falls_back_to_the_prior_and_says_how_to_measure(spec, monkeypatch):
    def fail(probed_spec, timeout=None):
        raise first_probe.ProbeFailed("exit status 1: no route to 127.0.0.2")

    monkeypatch.setattr(first_probe, "probe_in_child", fail)
    said = []
    assert first_probe.calibration_for_planning(spec, say=said.append) == prior_calibration(spec)
    assert "no route to 127.0.0.2" in said[-1] and "autodist calibrate -r " + TWO_NODES in said[-1]
    assert load_calibration(spec) is None


def test_auto_strategy_probes_once_per_cluster(spec, probes, tmp_path):
    builder = AutoStrategy()
    first = builder.job_calibration(spec)
    os.remove(str(next((tmp_path / ".autodist" / "calibration").iterdir())))   # even without the cache
    assert builder.job_calibration(spec) == first and len(probes) == 1
    assert builder.calibration(spec) == first.rounded()


def test_a_probe_that_runs_too_long_is_stopped(spec, monkeypatch):
    monkeypatch.setattr(first_probe, "_calibrate_argv", lambda path: [sys.executable, "-c", "import time; "
                                                                                           "time.sleep(60)"])
    with pytest.raises(first_probe.ProbeFailed, match="longer than 1 s"):
        first_probe.probe_in_child(spec, timeout=1.0)


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
