"""``autodist run --max-restarts``: a node killed mid-run -> a new job resumes from the checkpoint and ends
with the same weights as an uninterrupted run; killed once more than allowed -> exit 1 naming every attempt.

The reference is the example trained alone, in one process, on the whole batch (the cluster's equivalent).
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

from jobtools import REPO, job_processes, wait_until
from test_job_failures import _pgid_of

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
EXAMPLE = os.path.join(REPO, "examples", "unmodified_train.py")
STEPS = ["--session", "monitored", "--steps", "16", "--save-steps", "4"]


def _weights(text, node=""):
    lines = [line for line in text.splitlines() if line.startswith(node + "weights ")]
    assert lines, text[-3000:]
    return json.loads(lines[-1][len(node + "weights "):])


def _job_ids(chief):
    return sorted(set(re.findall(r"\[autodist\] job (\S+): \d+ nodes", chief.output())))


def _kill_worker_script(chief, count):
    """Wait for the ``count``-th job's worker to train a few steps, then kill its script."""
    wait_until(lambda: len(_job_ids(chief)) >= count, 150)
    job_id = _job_ids(chief)[count - 1]
    chief.wait_for(r"\[127\.0\.0\.2\] step 6 loss", 150)   # after the checkpoint at global step 4
    killed_at = time.monotonic()
    os.killpg(_pgid_of(job_id), signal.SIGKILL)
    chief.lines[:] = [(t, line.replace("step 6 loss", "step 6 was seen")) for t, line in chief.lines]
    return killed_at


def test_a_killed_node_restarts_the_job_which_resumes_and_matches(chiefs, tmp_path):
    alone = subprocess.run([sys.executable, EXAMPLE] + STEPS[2:], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert alone.returncode == 0, alone.stderr[-3000:]
    chief = chiefs(["-m", "autodist", "run", "-r", LOOPBACK, "-s", "AllReduce", "--max-restarts", "2",
                    "--restart-backoff", "1", EXAMPLE] + STEPS + ["--step-sleep", "0.3",
                                                                  "--checkpoint-dir", str(tmp_path / "ckpt")])
    killed_at = _kill_worker_script(chief, 1)
    assert chief.wait(240) == 0, chief.output()[-4000:]
    restart = chief.find(r"\[autodist\] restart 1 of 2 in 1 s: attempt 1 .*127\.0\.0\.2.*killed by SIGKILL")
    resumed = chief.find(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+) \(global step \d+\)")
    assert restart and resumed, chief.output()[-4000:]
    print("restart announced {:.1f} s after the kill, resumed from step {} {:.1f} s after it".format(
        restart[0] - killed_at, resumed[1].group(1), resumed[0] - killed_at))
    expected = _weights(alone.stdout)
    for node in ("", "[127.0.0.2] "):
        got = _weights(chief.output(), node)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)
    assert len(_job_ids(chief)) == 2
    for job_id in _job_ids(chief):
        assert wait_until(lambda: job_processes(job_id) == [], 10), job_processes(job_id)


def test_restarts_exhausted_exit_1_naming_every_attempt(chiefs, tmp_path):
    chief = chiefs(["-m", "autodist", "run", "-r", LOOPBACK, "--max-restarts", "1", "--restart-backoff", "1",
                    EXAMPLE] + STEPS + ["--steps", "400", "--step-sleep", "0.3",
                                        "--checkpoint-dir", str(tmp_path / "ckpt")])
    _kill_worker_script(chief, 1)
    _kill_worker_script(chief, 2)
    assert chief.wait(240) == 1, chief.output()[-4000:]
    out = chief.output()
    assert "[autodist] the job failed 2 time(s), no restart left (--max-restarts 1):" in out
    assert re.search(r"\[autodist\]   attempt 1 \(\d+ s\): worker on 127\.0\.0\.2 failed", out)
    assert re.search(r"\[autodist\]   attempt 2 \(\d+ s\): worker on 127\.0\.0\.2 failed", out)
    for job_id in _job_ids(chief):
        assert wait_until(lambda: job_processes(job_id) == [], 10), job_processes(job_id)


def test_sigterm_saves_a_checkpoint_at_the_current_step_then_stops_the_job(chiefs, tmp_path):
    ckpt = tmp_path / "ckpt"
    chief = chiefs(["-m", "autodist", "run", "-r", LOOPBACK, EXAMPLE] + STEPS + [
        "--steps", "400", "--save-steps", "1000", "--step-sleep", "0.3", "--checkpoint-dir", str(ckpt)])
    chief.wait_for(r"^step 6 loss", 150)
    chief.signal(signal.SIGTERM)
    assert chief.wait(60) == 143, chief.output()[-4000:]
    saved = chief.find(r"\[autodist\] saved checkpoint (\S+) \(global step (\d+)\) before stopping")
    assert saved, chief.output()[-4000:]
    steps_seen = len(re.findall(r"(?m)^step \d+ loss", chief.output()))
    assert steps_seen <= int(saved[1].group(2)) <= steps_seen + 1
    assert "model_checkpoint_path: \"{}\"".format(saved[1].group(1)) in (ckpt / "checkpoint").read_text()
    assert wait_until(lambda: job_processes(chief.job_id) == [], 10), job_processes(chief.job_id)
