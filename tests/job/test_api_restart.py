"""Surviving a failed node with the API and shrinking past it.

``AutoDist(max_restarts=, checkpoint_dir=, save_every=)``: a node's script killed mid-run -> the script runs
again as a new job, resumes from the checkpoint and ends with the variables of an uninterrupted run; killed
once more than allowed -> the supervisor exits 1 naming every attempt. ``autodist run --min-nodes 1``: the
other node cannot be reached at the relaunch -> the job resumes on one node from the checkpoint and ends as
an uninterrupted run. Every job's processes are checked by PID to be gone.

The other node is made unreachable honestly: the resource spec is read again by each attempt, and after
the first attempt started the test rewrites it so that 127.0.0.2 is reached over SSH at a port where
nothing listens; the relaunch's preflight then fails to connect to it, as for a machine that went away.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from jobtools import REPO, Chief, job_processes, unreachable_second_node, wait_until
from test_job_failures import _pgid_of

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
ONE_NODE = os.path.join(REPO, "resource_specs", "single_node_cpu.yml")
SCRIPT = os.path.join(REPO, "tests", "job", "scripts", "job_resume.py")
EXAMPLE = os.path.join(REPO, "examples", "unmodified_train.py")
_JOBS = re.compile(r"\[autodist\] job (\S+): \d+ nodes")


def _weights(text, node=""):
    lines = [line for line in text.splitlines() if line.startswith(node + "weights ")]
    assert lines, text[-3000:]
    return json.loads(lines[-1][len(node + "weights "):])


def _matches(got, expected):
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)


def _job_ids(chief):
    return list(dict.fromkeys(_JOBS.findall(chief.output())))


@pytest.fixture
def supervised():
    """``start(argv) -> Chief``; at the end every job any of them started is killed, by its job id."""
    started = []

    def start(argv):
        started.append(Chief(argv))
        return started[-1]
    yield start
    for chief in started:
        chief.cleanup()
        for job_id in _job_ids(chief):
            for pid in job_processes(job_id):
                os.kill(pid, signal.SIGKILL)


def _reference(tmp_path, argv):
    done = subprocess.run([sys.executable] + argv, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return _weights(done.stdout)


def _kill_worker_script(chief, count, after):
    """Once the ``count``-th job's chief has printed ``after``, SIGKILL the other node's script."""
    wait_until(lambda: len(_job_ids(chief)) >= count, 150)
    job_id = _job_ids(chief)[count - 1]
    chief.wait_for(after, 150)
    killed_at = time.monotonic()
    os.killpg(_pgid_of(job_id), signal.SIGKILL)
    chief.lines[:] = [(t, line.replace(" loss ", " was seen ")) for t, line in chief.lines]   # printed again later
    return killed_at


def _assert_no_process_left(chief):
    for job_id in _job_ids(chief):
        assert wait_until(lambda: job_processes(job_id) == [], 10), job_processes(job_id)


def test_api_script_restarts_after_a_killed_node_and_matches_an_uninterrupted_run(supervised, tmp_path):
    expected = _reference(tmp_path, [SCRIPT, ONE_NODE, str(tmp_path / "alone"), "--steps", "16"])
    chief = supervised([SCRIPT, LOOPBACK, str(tmp_path / "ckpt"), "--steps", "16", "--save-every", "4",
                        "--max-restarts", "2", "--step-sleep", "0.3"])
    killed_at = _kill_worker_script(chief, 1, r"^step 9 loss ")   # checkpoints at global steps 3 and 7
    assert chief.wait(240) == 0, chief.output()[-4000:]
    restart = chief.find(r"\[autodist\] restart 1 of 2 in 1 s: attempt 1 .*127\.0\.0\.2.*killed by SIGKILL")
    resumed = chief.find(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+) \(global step \d+\)")
    assert restart and resumed, chief.output()[-4000:]
    assert int(resumed[1].group(1)) >= 7
    print("restart line {:.1f} s after the kill, resumed from step {} {:.1f} s after it".format(
        restart[0] - killed_at, resumed[1].group(1), resumed[0] - killed_at))
    for node in ("", "[127.0.0.2] "):
        _matches(_weights(chief.output(), node), expected)
    assert len(_job_ids(chief)) == 2
    _assert_no_process_left(chief)


def test_api_restarts_exhausted_exit_1_naming_every_attempt(supervised, tmp_path):
    chief = supervised([SCRIPT, LOOPBACK, str(tmp_path / "ckpt"), "--steps", "400", "--save-every", "4",
                        "--max-restarts", "1", "--step-sleep", "0.3"])
    _kill_worker_script(chief, 1, r"^step 5 loss ")
    _kill_worker_script(chief, 2, r"^step 9 loss ")
    assert chief.wait(240) == 1, chief.output()[-4000:]
    out = chief.output()
    assert "[autodist] the job failed 2 time(s), no restart left (max_restarts=1):" in out
    for attempt in (1, 2):
        assert re.search(r"\[autodist\]   attempt {} \(\d+ s\): worker on 127\.0\.0\.2 failed".format(attempt), out)
    _assert_no_process_left(chief)


def test_min_nodes_resumes_on_the_node_left_when_the_other_cannot_be_reached(supervised, tmp_path):
    steps = ["--session", "monitored", "--steps", "16", "--save-steps", "4"]
    expected = _reference(tmp_path, [EXAMPLE] + steps[2:])
    spec = tmp_path / "spec.yml"
    spec.write_text(open(LOOPBACK).read())
    chief = supervised(["-m", "autodist", "run", "-r", str(spec), "-s", "AllReduce", "--max-restarts", "1",
                        "--restart-backoff", "1", "--min-nodes", "1", EXAMPLE] + steps + [
                            "--step-sleep", "0.3", "--checkpoint-dir", str(tmp_path / "ckpt")])
    wait_until(lambda: _job_ids(chief), 150)
    chief.wait_for(r"\[127\.0\.0\.2\] step 6 loss", 150)   # after the checkpoint at global step 4
    unreachable_second_node(spec)
    os.killpg(_pgid_of(_job_ids(chief)[0]), signal.SIGKILL)
    assert chief.wait(240) == 0, chief.output()[-4000:]
    out = chief.output()
    assert re.search(r"\[autodist\] attempt 2: leaving out 127\.0\.0\.2 \(.*\): 1 of 2 nodes remain", out), out
    assert "[autodist] plan change: nodes 127.0.0.1, 127.0.0.2 -> 127.0.0.1; builder AllReduce; replicas 2 -> 1" \
        in out, out[-4000:]
    assert re.search(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+) \(global step \d+\)", out)
    assert re.search(r"\[autodist\] job \S+: 1 nodes", out) is None   # one node: no job to launch
    _matches(_weights(out), expected)
    _assert_no_process_left(chief)
