"""Network faults between separate hosts: a link cut mid-step or before launch, and one slow link.

One three-node cluster at 1 Gbit/s serves the module; the cuts use its first
two nodes. Every test restores the links it changed, also after a failure.
Each prints its figures (detect and resume times, steps lost) for the record;
what it asserts is behaviour: who is named, why, where training resumed, the
final weights, and that no process of any of its jobs is left (on a host
behind a cut link: once the link is back, when its SSH session ends).
"""
import os
import re
import time

import numpy as np
import pytest

from jobtools import SCRIPTS, job_processes, linear_reference, wait_until
from test_multihost_jobs import UNMODIFIED, _weights, assert_weights, unmodified_reference

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

STALL_TIMEOUT = 40.0
_JOB = re.compile(r"\[autodist\] job (\S+): (\d+) nodes")


@pytest.fixture(scope="module")
def cluster(make_cluster):
    return make_cluster(3, "1gbit")


@pytest.fixture
def links(cluster):
    """``change(node, *action)``; every node's link is brought back up at 1 Gbit/s at the end."""
    changed = set()

    def change(node, *action):
        changed.add(node)
        return cluster.link(node, *action)
    yield change
    for node in changed:
        cluster.link(node, "up")
        cluster.link(node, "rate", cluster.rate)


@pytest.fixture(scope="module")
def expected():
    return unmodified_reference(40)


def _supervised(cluster, chiefs, tmp_path, backoff):
    return chiefs(cluster.exec_argv([
        "-m", "autodist", "run", "-r", cluster.spec_for(2), "-s", "AllReduce", "--stall-timeout", str(STALL_TIMEOUT),
        "--max-restarts", "1", "--restart-backoff", str(backoff), "--min-nodes", "1", UNMODIFIED, "--session",
        "monitored", "--steps", "40", "--save-steps", "4", "--step-sleep", "0.2", "--checkpoint-dir",
        str(tmp_path / "ckpt")]))


def _cut_after_a_checkpoint(chief, links):
    chief.wait_for(r"^\[10\.77\.0\.2\] step 10 loss", 240)   # past the checkpoints at global steps 4 and 8
    links(1, "down")
    cut = time.monotonic()
    last = max(int(s) for s in re.findall(r"^step (\d+) loss", chief.output(), re.M))
    return cut, last


def _no_process_left(chief):
    for job_id, _ in _JOB.findall(chief.output()):
        assert wait_until(lambda: job_processes(job_id) == [], 30), (job_id, job_processes(job_id))


def test_a_link_cut_mid_step_names_the_host_unreachable_and_the_job_resumes_on_the_chief(
        cluster, chiefs, links, tmp_path, expected):
    chief = _supervised(cluster, chiefs, tmp_path, backoff=1)
    cut, last = _cut_after_a_checkpoint(chief, links)
    detected = chief.wait_for(r"autodist: error: worker on 10\.77\.0\.2 is unreachable: no answer from "
                              r"10\.77\.0\.2:22", STALL_TIMEOUT + 30)[0]
    assert chief.wait(300) == 0, chief.output()[-4000:]
    out = chief.output()
    assert "training script exited" not in out and "(stopped or frozen?)" not in out   # not a dead process
    assert "stalled:" not in out[:out.index("is unreachable")]   # named unreachable, not first a stall
    assert re.search(r"\[autodist\] attempt 2: leaving out 10\.77\.0\.2 \(ssh \S+@10\.77\.0\.2:22: cannot reach the "
                     r"host: .*\): 1 of 2 nodes remain \(min_nodes 1\)", out), out[-4000:]
    assert "plan change: nodes 10.77.0.1, 10.77.0.2 -> 10.77.0.1; builder AllReduce; replicas 2 -> 1" in out
    resumed = chief.find(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+) \(global step")
    assert resumed, out[-4000:]
    print("link cut after the chief's step {}: detected after {:.1f} s, resumed on one node from global step {} "
          "after {:.1f} s: {} step(s) lost".format(last, detected - cut, resumed[1].group(1), resumed[0] - cut,
                                                   last + 1 - int(resumed[1].group(1))))
    assert [n for _, n in _JOB.findall(out)] == ["2"]   # the second attempt has one node: no job to launch
    assert_weights(_weights(out), expected)
    # Behind the cut its processes live on (nothing reaches them; its sshd keeps retrying the dead session);
    # once the link is back, the session ends and they with it.
    links(1, "up")
    _no_process_left(chief)


def test_a_link_restored_before_the_next_attempt_lets_it_use_the_host_again(
        cluster, chiefs, links, tmp_path, expected):
    chief = _supervised(cluster, chiefs, tmp_path, backoff=4)
    cut, _ = _cut_after_a_checkpoint(chief, links)
    chief.wait_for(r"worker on 10\.77\.0\.2 is unreachable", STALL_TIMEOUT + 30)
    links(1, "up")
    restored = time.monotonic()
    assert chief.wait(300) == 0, chief.output()[-4000:]
    out = chief.output()
    # attempt 2's preflight reached the host (else it would have been left out): it ran after the link was back
    assert "leaving out" not in out and [n for _, n in _JOB.findall(out)] == ["2", "2"], out[-4000:]
    resumed = chief.find(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+)")
    assert resumed, out[-4000:]
    print("link restored {:.1f} s after the cut; attempt 2 resumed on both nodes from global step {}".format(
        restored - cut, resumed[1].group(1)))
    for node in ("", "[10.77.0.2] "):
        assert_weights(_weights(out, node), expected)
    _no_process_left(chief)


def test_a_link_cut_before_launch_fails_preflight_naming_the_host_and_starts_nothing(cluster, chiefs, links):
    links(1, "down")
    chief = chiefs(cluster.exec_argv([os.path.join(SCRIPTS, "job_linear.py"), cluster.spec_for(2), "--steps", "3"]))
    assert chief.wait(120) != 0
    out = chief.output()
    assert "preflight failed on 1 host(s); nothing was launched" in out, out[-3000:]
    assert re.search(r"10\.77\.0\.2: ssh \S+@10\.77\.0\.2:22: cannot reach the host: ", out), out[-3000:]
    assert chief.job_id is None and "RESULT" not in out


def test_a_slow_link_is_named_the_straggler_with_its_share_while_the_job_runs(cluster, chiefs, links):
    links(2, "rate", "100mbit")   # a tenth of the others'
    chief = chiefs(cluster.exec_argv([os.path.join(SCRIPTS, "job_linear.py"), cluster.spec_for(3), "--strategy",
                                      "PS", "--steps", "14", "--ballast", "4000000"]))   # 16 MB more a step
    _, found = chief.wait_for(r"\[autodist\] straggler: (\S+): its link is busy (\S+) s of each (\S+) s step "
                              r"\((\d+) %\).*the other nodes' links: (.*)$", 240)
    assert found.group(1) == "10.77.0.3", found.group(0)
    share = int(found.group(4))
    others = [int(p) for p in re.findall(r"(\d+) %", found.group(5))]
    assert share >= 50 and all(share >= 2 * p for p in others), found.group(0)
    named_at = max(int(s) for s in re.findall(r"^STEP (\d+)$", chief.output(), re.M))
    print("straggler line at the chief's step {}: {}".format(named_at, found.group(0)))
    assert chief.wait(300) == 0, chief.output()[-4000:]   # the job kept running to its end
    out = chief.output()
    assert out.index(found.group(0)) < out.index("\nSTEP 13\n")   # named while the job ran: before its last step
    _, w = linear_reference(seed=0, steps=14)
    for result in chief.results().values():
        np.testing.assert_allclose(result["w"], w, rtol=1e-4, atol=1e-5)
    assert job_processes(chief.job_id) == []
