"""Which nodes an elastic attempt runs on: the discovery script's output, the candidates, back-off, slots, options.

The whole loop (supervisor, attempts, relaunches) runs in ``tests/job/test_elastic_jobs.py``.
"""
import os

import pytest

from autodist.errors import ArgumentError, PreflightError
from autodist.runtime.elastic import elastic_settings, scaled_batch_size
from autodist.runtime.elastic.discovery import Discovery, parse_hosts
from autodist.runtime.elastic.membership import MAX_BACKOFF_FACTOR, Membership, nodes_spec, replica_count, with_hosts
from autodist.spec.resource_spec import ResourceSpec
from process_state import alive

SPEC = {"nodes": [{"address": "127.0.0.1", "chief": True, "gpus": [0, 1]}, {"address": "127.0.0.2", "gpus": [0, 1, 2]},
                  {"address": "127.0.0.3", "cpus": [0, 1]}]}


def _spec():
    return ResourceSpec.from_dict(SPEC, path="spec.yml")


def test_the_script_prints_addresses_with_optional_slots():
    assert parse_hosts("10.0.0.1\n\n# spare\n10.0.0.2:2   # two GPUs free\n[fe80::1]:4\n[fe80::2]\n") == {
        "10.0.0.1": None, "10.0.0.2": 2, "fe80::1": 4, "fe80::2": None}
    for bad in ("127.0.0.1:0", "127.0.0.1:x", "two words", "[fe80::1]x"):
        with pytest.raises(ValueError):
            parse_hosts(bad)


def test_a_failing_script_is_reported_and_finds_nothing(tmp_path):
    def script(text):
        path = tmp_path / "hosts.sh"
        path.write_text("#!/bin/sh\n" + text)
        path.chmod(0o755)
        return Discovery(str(path), timeout=2.0).find()
    assert script("echo 127.0.0.1; echo 127.0.0.2:1\n").hosts == {"127.0.0.1": None, "127.0.0.2": 1}
    failed = script("echo no inventory >&2; exit 3\n")
    assert failed.hosts is None and failed.problem == "it exited with code 3: no inventory"
    assert "did not finish within 2 s" in script("sleep 30\n").problem
    assert "'a b', which is not an address" in script("echo a b\n").problem
    assert "cannot be run" in Discovery(os.path.join(str(tmp_path), "missing")).find().problem


def test_a_script_that_times_out_is_ended_with_its_children(tmp_path):
    # subprocess.run(timeout=) killed only the script: its children (here a sleep) lived on
    import time
    pid_file = tmp_path / "child.pid"
    path = tmp_path / "hosts.sh"
    path.write_text("#!/bin/sh\nsleep 300 &\necho $! > {}\nsleep 300\n".format(pid_file))
    path.chmod(0o755)
    assert "did not finish within 1 s" in Discovery(str(path), timeout=1.0).find().problem
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_wanted_nodes_keep_the_chief_and_the_limit_and_skip_what_is_set_aside():
    said = []
    members = Membership(_spec(), 1, 2, backoff=10.0, say=said.append)
    assert members.wanted(None) == ["127.0.0.1", "127.0.0.2"]                       # every candidate, at most 2
    assert members.wanted({"127.0.0.3": None, "127.9.9.9": None}) == ["127.0.0.1", "127.0.0.3"]
    assert any("lists 1 host(s) that are not nodes of spec.yml (127.9.9.9); they are left out" in line for line in said)
    assert any("does not list the chief 127.0.0.1; it stays" in line for line in said)
    assert members.wanted({"127.0.0.2": 4, "127.0.0.3": 2}) == ["127.0.0.1", "127.0.0.3"]
    assert said[-1] == "elastic: the discovery script gives 127.0.0.2 4 slots, but spec.yml lists 3 gpus for it; " \
                       "it is left out"
    assert members.set_aside("127.0.0.2", "preflight: cannot reach it", now=100.0) == 10.0
    assert members.wanted(None, now=105.0) == ["127.0.0.1", "127.0.0.3"]
    assert members.wanted(None, now=110.0) == ["127.0.0.1", "127.0.0.2"]            # tried again after the back-off
    assert [members.set_aside("127.0.0.2", "again", now=200.0) for _ in range(6)] == [
        20.0, 40.0, 80.0, 160.0, 10.0 * MAX_BACKOFF_FACTOR, 10.0 * MAX_BACKOFF_FACTOR]
    assert said[-1] == "elastic: 127.0.0.2 set aside for 160 s (failure 7: again)"


def test_an_attempts_spec_has_its_nodes_with_the_slots_the_script_gives():
    spec = nodes_spec(_spec(), ["127.0.0.1", "127.0.0.2"], {"127.0.0.2": 1})
    assert [n.address for n in spec.node_specs] == ["127.0.0.1", "127.0.0.2"]
    assert replica_count(spec) == 3 and replica_count(_spec()) == 7
    assert replica_count(nodes_spec(_spec(), ["127.0.0.1", "127.0.0.3"], {"127.0.0.3": 1})) == 3   # CPUs when no GPU
    with pytest.raises(PreflightError, match="gives it 4 slots, but the spec lists 3 gpus"):
        nodes_spec(_spec(), ["127.0.0.1", "127.0.0.2"], {"127.0.0.2": 4})


def test_elastic_options_are_checked_before_anything_runs():
    assert elastic_settings(_spec()) is None                                       # not elastic
    settings = elastic_settings(_spec(), discovery_script="hosts.sh", min_nodes=2, preemption_signal="usr1")
    assert (settings.min_nodes, settings.max_nodes, settings.preemption_signal) == (2, 3, "SIGUSR1")
    assert elastic_settings(_spec(), elastic=True, preemption_signal="none").preemption_signal is None
    for kwargs, message in ((dict(max_nodes=2), "max_nodes limits an elastic job"),
                            (dict(elastic=True, min_nodes=3, max_nodes=2), "1 <= min_nodes <= max_nodes <= 3"),
                            (dict(elastic=True, max_nodes=4), "1 <= min_nodes <= max_nodes <= 3"),
                            (dict(elastic=True, preemption_signal="SIGKILL"), "not a signal a process can handle"),
                            (dict(elastic=True, interval=0.0), "discovery_interval must be a number of seconds")):
        with pytest.raises(ArgumentError, match=message):
            elastic_settings(_spec(), **kwargs)


def test_keeping_the_per_replica_batch_scales_the_global_batch():
    import numpy as np
    x = np.zeros([10, 2])
    assert scaled_batch_size("fit", x, 64, 1.0) == 64
    assert scaled_batch_size("fit", x, 64, 1.5) == 96 and scaled_batch_size("fit", x, None, 0.5) == 16
    with pytest.raises(ArgumentError, match="batch_size 64 x 0.333333 .* is not a whole number"):
        scaled_batch_size("fit", x, 64, 1 / 3)
    with pytest.raises(ArgumentError, match="brings its own batches"):
        scaled_batch_size("fit", iter([x]), 64, 2.0)


def test_thousands_of_unknown_hosts_are_one_line_with_their_count():
    said = []
    members = Membership(_spec(), 1, 3, backoff=10.0, say=said.append)
    found = dict({"127.0.0.1": None}, **{"10.1.{}.{}".format(i // 250, i % 250): None for i in range(5000)})
    assert members.wanted(found) == ["127.0.0.1"]
    assert members.wanted(found) == ["127.0.0.1"]   # and not again at the next run
    assert len(said) == 1, said[:3]                  # before: 5000 lines
    assert said[0].startswith("elastic: the discovery script lists 5000 host(s) that are not nodes of spec.yml "
                              "(10.1.0.0, 10.1.0.1, 10.1.0.10 and 4997 more); they are left out")
    assert "node_template" in said[0]


TEMPLATED = {"nodes": [{"address": "127.0.0.1", "chief": True}], "node_template": {"cpus": [0, 1], "threads": 2}}


def test_a_node_template_lets_a_host_the_spec_does_not_list_join_with_its_settings():
    spec = ResourceSpec.from_dict(TEMPLATED, path="spec.yml")
    said = []
    members = Membership(spec, 1, None, backoff=10.0, say=said.append)
    assert members.wanted({"127.0.0.1": None, "127.0.0.7": None, "127.0.0.5": 1}) == [
        "127.0.0.1", "127.0.0.7", "127.0.0.5"]                              # the script's order, no limit
    assert members.wanted({"127.0.0.1": None, "10.0.0.9": None}) == ["127.0.0.1"]   # loopback and not: refused
    assert said == ["elastic: 10.0.0.9 cannot join through the node template of spec.yml: missing: node '10.0.0.9' "
                    "is neither the chief nor a loopback address, so it is reached over SSH; name a group under "
                    "'ssh'; it is left out"]
    attempt = nodes_spec(spec, ["127.0.0.1", "127.0.0.7", "127.0.0.5"], {"127.0.0.5": 1})
    assert [(n.address, n.cpus, n.threads) for n in attempt.node_specs] == [
        ("127.0.0.1", (0,), 0), ("127.0.0.7", (0, 1), 2), ("127.0.0.5", (0,), 2)]
    assert with_hosts(spec, ["127.0.0.1"]) is spec and with_hosts(_spec(), ["127.0.0.9"]).nodes == _spec().nodes
    settings = elastic_settings(spec, discovery_script="hosts.sh", min_nodes=2)
    assert (settings.min_nodes, settings.max_nodes) == (2, None)            # no limit but the one given
    assert elastic_settings(spec, elastic=True, max_nodes=40).max_nodes == 40
    with pytest.raises(ArgumentError, match="max_nodes <= any number \\(the spec has a node_template\\)"):
        elastic_settings(spec, elastic=True, min_nodes=3, max_nodes=2)
