"""Real Slurm on separate hosts (``autodist cluster up --slurm``): the sbatch example, a killed task, distributions.

One cluster of two hosts serves the module: slurmctld and munged in node 0,
a slurmd in each node (Debian's slurm-wlm), nothing stood in for. The example
``examples/slurm/train.sbatch`` is submitted with ``sbatch`` as a user would,
training an unmodified Keras ``fit`` script (``tests/job/scripts/plain_steps.py``,
every step on other rows) with a checkpoint every 3 steps: once through, then
again with host 1's task killed (SIGKILL) after step 8, when srun's
``--kill-on-bad-exit`` ends the step with status 143 and the script's retry
starts it again, which resumes at the saved step and ends with the weights of
the first run. Then srun's arbitrary distribution (task 0 on host 1) trains
like one device, and two tasks on one host are refused by name. The times
(submit to first step, kill to the first step trained again) are printed.
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tiers

from clustertools import slurm_missing_reason
from jobtools import REPO, SCRIPTS, npz_weights, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.slurm]

SBATCH = os.path.join(REPO, "examples", "slurm", "train.sbatch")
SCRIPT = os.path.join(SCRIPTS, "plain_steps.py")


@pytest.fixture(scope="module")
def cluster(make_cluster):
    reason = slurm_missing_reason()
    if reason:
        tiers.unavailable("slurm", reason)
    return make_cluster(2, "1gbit", "--slurm")


class Output:
    """A batch job's output file, read as it grows; each line with the time it was first seen."""

    def __init__(self, path):
        self.path, self.lines = path, []

    def _read(self):
        try:
            with open(self.path, errors="replace") as f:
                text = f.read()
        except OSError:
            return
        now = time.monotonic()
        for line in text.splitlines()[len(self.lines):]:
            self.lines.append((now, line))

    def find(self, pattern):
        self._read()
        regex = re.compile(pattern)
        return next(((when, m) for when, m in ((w, regex.search(line)) for w, line in self.lines) if m), None)

    def wait_for(self, pattern, timeout):
        found = wait_until(lambda: self.find(pattern), timeout, interval=0.2)
        assert found, "no line matching {!r} within {} s:\n{}".format(pattern, timeout, self.text()[-4000:])
        return self.find(pattern)

    def text(self):
        self._read()
        return "\n".join(line for _, line in self.lines)


def _submit(cluster, tmp_path, name, steps=15):
    out = Output(str(tmp_path / "{}.out".format(name)))
    done = cluster.run(["sbatch", "--parsable", "-N", "2", "-o", out.path, "--chdir", REPO,
                        "--export=ALL,CHECKPOINT_DIR={},CHECKPOINT_STEPS=3,TF_CPP_MIN_LOG_LEVEL=2".format(
                            tmp_path / (name + "-ckpt")),
                        SBATCH, SCRIPT, str(tmp_path / name), "--mode", "fit", "--steps", str(steps), "--sleep", "0.4"])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0], out, time.monotonic()


def _job_state(cluster, job_id):
    shown = cluster.run(["scontrol", "show", "job", job_id]).stdout
    state, code = re.search(r"JobState=(\S+)", shown), re.search(r"ExitCode=(\S+)", shown)
    return (state.group(1) if state else "UNKNOWN"), (code.group(1) if code else None)


def _finished(cluster, job_id, out, timeout=300):
    assert wait_until(lambda: _job_state(cluster, job_id)[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
                      timeout, interval=1.0), out.text()[-4000:]
    return _job_state(cluster, job_id)


def _task(job_id, rank):
    """The training script of task ``rank`` of Slurm job ``job_id`` (its process: found by its environment)."""
    wanted = {b"SLURM_JOB_ID=" + job_id.encode(), b"SLURM_PROCID=" + str(rank).encode()}
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/{}/cmdline".format(entry), "rb") as f:
                command = f.read()
            with open("/proc/{}/environ".format(entry), "rb") as f:
                environ = set(f.read().split(b"\0"))
        except OSError:
            continue
        if b"plain_steps.py" in command and b"autodist" in command and wanted <= environ:
            return int(entry)
    raise AssertionError("no task {} of job {}".format(rank, job_id))


def test_the_sbatch_example_trains_and_after_a_killed_task_retries_and_resumes_exactly(cluster, tmp_path):
    job_id, out, submitted = _submit(cluster, tmp_path, "whole")
    first_step = out.wait_for(r"^STEP 1$", 300)[0]
    assert _finished(cluster, job_id, out) == ("COMPLETED", "0:0"), out.text()[-4000:]
    job_id, out, _ = _submit(cluster, tmp_path, "killed")
    out.wait_for(r"^STEP 8$", 300)
    os.kill(_task(job_id, 1), signal.SIGKILL)
    killed_at = time.monotonic()
    assert _finished(cluster, job_id, out) == ("COMPLETED", "0:0"), out.text()[-4000:]
    text = out.text()
    assert "srun: error: {}: task 1: Killed".format(cluster.address(1)) in text, text[-4000:]
    assert "attempt 1 of 4: the step ended with status 143" in text   # srun: the highest status, SIGTERM's
    resumed = out.find(r"^\[autodist\] resuming from checkpoint \S+model\.ckpt-(\d+) \(global step \d+\)$")
    going_on = out.find(r"^\[autodist\] the script is at training step \d+ again")
    assert resumed and going_on, text[-4000:]
    assert 6 <= int(resumed[1].group(1)) <= 8
    assert re.search(r"the job succeeded: its checkpoints in \S+killed-ckpt are removed", text)
    for node in (0, 1):
        whole = npz_weights(tmp_path / "whole-0.npz")
        for got, want in zip(npz_weights(tmp_path / "killed-{}.npz".format(node)), whole):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)   # the same computation: float32 rounding
    print("sbatch to the first step {:.1f} s; kill to the step after the checkpoint trained again {:.1f} s (resumed "
          "from step {}; machine loaded)".format(first_step - submitted, going_on[0] - killed_at,
                                                  resumed[1].group(1)))


def _alone(tmp_path, steps):
    done = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "alone"), "--mode", "feed", "--steps", str(steps)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return npz_weights(tmp_path / "alone-0.npz")


def test_the_arbitrary_distribution_places_task_zero_on_its_host_and_two_tasks_a_host_are_refused(cluster, tmp_path):
    expected = _alone(tmp_path, 3)
    second, first = cluster.address(1), cluster.address(0)
    done = cluster.run(["srun", "-N2", "-n2", "-m", "arbitrary", "-w", "{},{}".format(second, first),
                        "--kill-on-bad-exit=1", "--chdir", REPO, sys.executable, "-m", "autodist", "run",
                        "--no-progress", SCRIPT, str(tmp_path / "arbitrary"), "--mode", "feed", "--steps", "3"],
                       timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "this is {} ({}:29400)".format(second, second) in done.stdout   # task 0, the chief, on host 1
    for node in (0, 1):
        for got, want in zip(npz_weights(tmp_path / "arbitrary-{}.npz".format(node)), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)   # two nodes' mean vs one batch: float32
    crowded = cluster.run(["srun", "-N1", "-n2", "--chdir", REPO, sys.executable, "-m", "autodist", "run", SCRIPT,
                           str(tmp_path / "crowded")], timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert crowded.returncode == 2, crowded.stdout + crowded.stderr
    assert "several processes of the job run on {} (2 tasks)".format(first) in crowded.stderr
