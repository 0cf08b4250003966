"""Elastic jobs on loopback nodes: discovery grows and shrinks a job, a preemption notice to a member, back-off.

``autodist run --host-discovery-script``: the script reads a hosts file the
test rewrites. The job starts on 127.0.0.1 and .2 (127.0.0.4, reached over SSH
at a port where nothing listens, fails preflight: set aside, tried again after
its back-off, set aside longer), grows to three nodes when .3 appears, shrinks
when .2 disappears, and ends with the weights of one device trained
uninterrupted on the same global batch, with no failure counted
(``--max-restarts 0``: one would end the job).

``AutoDist(elastic=True)``: SIGTERM to the other node's script -> one
checkpoint, at the step both nodes finished last (the member printed it; the
chief's call of it is the one that stops the job), before the member's grace
ran out (else it would have died and a failure been counted); the job goes on
alone and ends with the weights of an uninterrupted run (the global batch is
kept, so the run that changed membership at that step has them too).

Every job's processes are checked by PID to be gone. The figures of each
change (time to the first step of the new plan, steps lost) are printed.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from jobtools import REPO, SCRIPTS, job_processes, wait_until

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
ONE_NODE = os.path.join(REPO, "resource_specs", "single_node_cpu.yml")
_JOBS = re.compile(r"\[autodist\] job (\S+): \d+ nodes")
_RESUMED = re.compile(r"\[autodist\] membership change (\d+), (.*): the first step of the new plan ran ([\d.]+) s "
                      r"after the change; steps lost: (\d+)")


def _weights(text, node=""):
    lines = [line for line in text.splitlines() if line.startswith(node + "weights ")]
    assert lines, text[-3000:]
    return json.loads(lines[-1][len(node + "weights "):])


def _matches(got, expected):
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)


def _reference(argv):
    done = subprocess.run([sys.executable] + argv, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return _weights(done.stdout)


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_ids(chief):
    return list(dict.fromkeys(_JOBS.findall(chief.output())))


def _no_process_left(chief):
    for job_id in _job_ids(chief):
        assert wait_until(lambda: job_processes(job_id) == [], 10), job_processes(job_id)


def _report_changes(chief):
    for when, match in [(t, _RESUMED.search(line)) for t, line in chief.lines]:
        if match:
            print("membership change {} ({}): first step of the new plan after {} s, steps lost {}".format(
                *match.groups()))
    return [m.groups() for m in map(_RESUMED.search, chief.output().splitlines()) if m]


def _write_hosts(path, hosts):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(h + "\n" for h in hosts))
    os.replace(tmp, str(path))


def test_discovery_grows_and_shrinks_the_job_and_sets_a_failing_host_aside(chiefs, tmp_path):
    expected = _reference([os.path.join(SCRIPTS, "elastic_train.py"), "--steps", "30"])
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump({"nodes": [
        {"address": "127.0.0.1", "chief": True}, {"address": "127.0.0.2"}, {"address": "127.0.0.3"},
        {"address": "127.0.0.4", "ssh_config": "gone"}], "ssh": {"gone": {"port": _closed_port(),
                                                                          "connect_timeout": 5}}}))
    hosts = tmp_path / "hosts"
    _write_hosts(hosts, ["127.0.0.1", "127.0.0.2", "127.0.0.4"])
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\ncat {}\n".format(hosts))
    script.chmod(0o755)
    chief = chiefs(["-m", "autodist", "run", "-r", str(spec), "-s", "AllReduce", "--host-discovery-script",
                    str(script), "--discovery-interval", "0.5", "--discovery-settle", "1", "--host-backoff", "2",
                    "--min-nodes", "1",
                    "--max-nodes", "3", os.path.join(SCRIPTS, "elastic_train.py"), "--steps", "30",
                    "--checkpoint-dir", str(tmp_path / "ckpt"), "--step-sleep", "0.3"])
    chief.wait_for(r"node 1 of 2 step 5$", 150)
    _write_hosts(hosts, ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"])
    chief.wait_for(r"node 2 of 3 step 14$", 150)
    _write_hosts(hosts, ["127.0.0.1", "127.0.0.3", "127.0.0.4"])
    assert chief.wait(240) == 0, chief.output()[-5000:]
    out = chief.output()
    assert re.search(r"\[autodist\] elastic: 127\.0\.0\.4 set aside for 2 s \(failure 1: preflight: .*cannot reach", out)
    assert "[autodist] elastic: trying 127.0.0.4 again (its back-off is over)" in out, out[-5000:]
    assert re.search(r"\[autodist\] elastic: 127\.0\.0\.4 set aside for 4 s \(failure 2: preflight: ", out)
    assert "[autodist] membership change 1: 127.0.0.3 joins;" in out
    assert "[autodist] plan change: nodes 127.0.0.1, 127.0.0.2 -> 127.0.0.1, 127.0.0.2, 127.0.0.3; builder " \
           "AllReduce; replicas 2 -> 3" in out
    assert "[autodist] membership change 2: 127.0.0.2 leaves: no longer listed by the discovery script;" in out
    assert "[autodist] plan change: nodes 127.0.0.1, 127.0.0.2, 127.0.0.3 -> 127.0.0.1, 127.0.0.3; builder " \
           "AllReduce; replicas 3 -> 2" in out
    assert not re.search(r"\[autodist\] restart \d|worker on \S+ failed", out)   # no failure was counted
    assert [number for number, _, _, lost in _report_changes(chief)] == ["1", "2"]
    _matches(_weights(out), expected)
    _matches(_weights(out, "[127.0.0.3] "), expected)
    assert len(_job_ids(chief)) == 3
    _no_process_left(chief)


def _member_pid(job_id, address):
    """The pid of the script process of ``address`` in job ``job_id`` (found by its AUTODIST_JOB)."""
    for pid in job_processes(job_id):
        try:
            with open("/proc/{}/environ".format(pid), "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"AUTODIST_JOB=") and json.loads(item[13:]).get("address") == address:
                return pid
    return None


def last_steps(first_attempt):
    """The last ``node i of 2 step N`` each node printed: the checkpoint is of the last step both finished, which the
    member printed; the chief's call of that step is the one that stops the job (the change is made after the
    chief's session call, at an update boundary), so its own last line is the step before."""
    return {role: max([int(s) for s in re.findall(r"^{}node \d of 2 step (\d+)$".format(prefix), first_attempt, re.M)],
                      default=None) for role, prefix in (("chief", ""), ("member", r"\[127\.0\.0\.2\] "))}


def test_sigterm_to_a_member_saves_one_step_everywhere_and_the_job_goes_on(chiefs, tmp_path):
    script = os.path.join(SCRIPTS, "job_elastic.py")
    expected = _reference([script, ONE_NODE, str(tmp_path / "alone"), "--steps", "24", "--alone"])
    chief = chiefs([script, LOOPBACK, str(tmp_path / "ckpt"), "--steps", "24", "--step-sleep", "0.3"])
    chief.wait_for(r"\[127\.0\.0\.2\] node 1 of 2 step 6$", 150)
    member = _member_pid(_job_ids(chief)[0], "127.0.0.2")
    assert member is not None
    os.kill(member, signal.SIGTERM)
    noticed = time.monotonic()
    assert chief.wait(240) == 0, chief.output()[-5000:]
    out = chief.output()
    saved = chief.find(r"\[autodist\] saved checkpoint .*model\.ckpt-(\d+) \(global step (\d+)\) before stopping")
    assert saved, out[-5000:]
    step = int(saved[1].group(2))
    assert last_steps(out[:out.index("elastic: attempt 2")]) == {"chief": step - 1, "member": step}, (step, out)
    print("checkpoint at global step {} saved {:.1f} s after the SIGTERM".format(step, saved[0] - noticed))
    assert re.search(r"\[autodist\] membership change 1: 127\.0\.0\.2 leaves after a preemption notice \(SIGTERM\); "
                     r"saving a checkpoint at global step {} and stopping the job".format(step), out)
    assert "[autodist] elastic: 127.0.0.2 set aside for 600 s (failure 1: a preemption notice)" in out
    assert "[autodist] plan change: nodes 127.0.0.1, 127.0.0.2 -> 127.0.0.1; builder AllReduce; replicas 2 -> 1" in out
    assert "resuming from checkpoint" in out and "restart" not in out
    assert [lost for _, _, _, lost in _report_changes(chief)] == ["0"]
    _matches(_weights(out), expected)
    _no_process_left(chief)


def test_a_flapping_host_changes_nothing_then_a_host_the_spec_does_not_list_joins_through_its_template(chiefs,
                                                                                                        tmp_path):
    # The spec lists only the chief; its node template admits 127.0.0.2. The discovery script lists 127.0.0.2 at
    # every other run (before: a change at each, every attempt interrupted after a step, the job never ended and
    # trained past its last step), then at every run: it joins once it has stayed listed for --discovery-settle s.
    expected = _reference([os.path.join(SCRIPTS, "elastic_train.py"), "--steps", "30"])
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump({"nodes": [{"address": "127.0.0.1", "chief": True}], "node_template": {}}))
    mode, runs = tmp_path / "mode", tmp_path / "runs"
    mode.write_text("flip")
    script = tmp_path / "discover.sh"
    script.write_text('#!/bin/sh\nn=$(cat {runs} 2>/dev/null || echo 0)\necho $((n + 1)) > {runs}\necho 127.0.0.1\n'
                      'if [ "$(cat {mode})" = stable ] || [ $((n % 2)) = 1 ]; then echo 127.0.0.2; fi\n'.format(
                          runs=runs, mode=mode))
    script.chmod(0o755)
    ckpt = str(tmp_path / "ckpt")
    chief = chiefs(["-m", "autodist", "run", "-r", str(spec), "-s", "AllReduce", "--host-discovery-script",
                    str(script), "--discovery-interval", "0.5", "--discovery-settle", "3",
                    os.path.join(SCRIPTS, "elastic_train.py"), "--steps", "30", "--checkpoint-dir", ckpt,
                    "--step-sleep", "0.3"])
    chief.wait_for(r"^node 0 of 1 step 8$", 150)
    assert int(runs.read_text()) >= 8 and "membership change" not in chief.output(), chief.output()[-3000:]
    mode.write_text("stable")
    assert chief.wait(240) == 0, chief.output()[-5000:]
    out = chief.output()
    assert set(re.findall(r"\[autodist\] membership change \d+: [^;]*;", out)) == {
        "[autodist] membership change 1: 127.0.0.2 joins;"}, out[-5000:]   # the supervisor's line and the chief's
    assert "[autodist] plan change: nodes 127.0.0.1 -> 127.0.0.1, 127.0.0.2; builder AllReduce; replicas 1 -> 2" in out
    assert max(int(s) for s in re.findall(r"node \d of \d step (\d+)$", out, re.M)) == 30   # never beyond
    _matches(_weights(out), expected)
    _matches(_weights(out, "[127.0.0.2] "), expected)
    assert "elastic: attempt 2 on 2 node(s): 127.0.0.1, 127.0.0.2" in out and "attempt 3" not in out
    assert "absl::InitializeLog" not in out and "oneDNN" not in out   # the supervisor's TensorFlow start-up lines
    _no_process_left(chief)
    # The job ended at its last step: run again, it restores step 30 and stops before any step (it ran one more)
    again = chiefs(["-m", "autodist", "run", "-r", ONE_NODE, os.path.join(SCRIPTS, "elastic_train.py"), "--steps",
                    "30", "--checkpoint-dir", ckpt])
    assert again.wait(120) == 0, again.output()[-3000:]
    assert "the checkpoint is at global step 30, the script's last step is 30: nothing is left to train" \
        in again.output()
    assert not re.search(r"step \d+$", again.output(), re.M), again.output()[-3000:]
