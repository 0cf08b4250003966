"""``autodist run --checkpoint-dir``: a job killed mid-run and run again resumes at the saved step, exactly.

Two loopback nodes run an unmodified script (``scripts/plain_steps.py``: every
step reads other rows; a tf.compat.v1 loop over a ``tf.data`` iterator, and a
Keras ``fit`` with shuffled batches) with a checkpoint every 3 steps. The
chief is killed with SIGKILL after its step 8 (the other node then leaves by
itself); the same command run again restores step 6, passes over the steps
before it and ends with the weights of the script trained on one node,
uninterrupted; the checkpoints are removed when it succeeds. In-process
cases (a failing script, every input kind, refusals): ``tests/runtime/autorun/test_script_checkpoints.py``.
"""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from jobtools import REPO, SCRIPTS, npz_weights, job_processes, wait_until

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
SCRIPT = os.path.join(SCRIPTS, "plain_steps.py")


def _reference(tmp_path, mode):
    """The script trained uninterrupted on one node (the global batch; autodist's shuffles for ``fit``)."""
    spec = tmp_path / "one_node.yml"
    spec.write_text("nodes:\n  - address: 127.0.0.1\n")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", "-r", str(spec), "--no-progress", SCRIPT,
                           str(tmp_path / "reference"), "--mode", mode, "--steps", "15"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return npz_weights(tmp_path / "reference-0.npz")


@pytest.mark.parametrize("mode", ["dataset", "fit"])
def test_a_job_killed_mid_run_and_run_again_resumes_at_the_saved_step(chiefs, tmp_path, mode):
    expected = _reference(tmp_path, mode)
    ckpt = tmp_path / "ckpt"
    command = ["-m", "autodist", "run", "-r", LOOPBACK, "-s", "AllReduce", "--no-progress", "--checkpoint-dir",
               str(ckpt), "--checkpoint-steps", "3", SCRIPT, str(tmp_path / "out"), "--mode", mode, "--steps", "15",
               "--sleep", "0.4"]
    first = chiefs(command)
    first.wait_for(r"^STEP 8$", 240)
    os.killpg(first.proc.pid, signal.SIGKILL)   # the chief's process and nothing else: the other node sees it go
    killed_at = time.monotonic()
    assert first.wait(30) == -signal.SIGKILL
    assert wait_until(lambda: job_processes(first.job_id) == [], 30), job_processes(first.job_id)
    restarted_at = time.monotonic()
    second = chiefs(command)
    assert second.wait(300) == 0, second.output()[-4000:]
    resumed = second.find(r"^\[autodist\] resuming from checkpoint \S+model\.ckpt-(\d+) \(global step \d+\)$")
    going_on = second.find(r"^\[autodist\] the script is at training step \d+ again")
    assert resumed and going_on, second.output()[-4000:]
    assert 6 <= int(resumed[1].group(1)) <= 8
    print("{}: resumed from step {}, training again {:.1f} s after the kill (the test started the second run "
          "{:.1f} s after it)".format(mode, resumed[1].group(1), going_on[0] - killed_at,
                                       restarted_at - killed_at))
    for node in (0, 1):
        for got, want in zip(npz_weights(tmp_path / "out-{}.npz".format(node)), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)   # 2 nodes' mean vs one batch: float32
    assert not ckpt.exists(), os.listdir(ckpt)
    assert re.search(r"the job succeeded: its checkpoints in \S+ are removed", second.output())
    assert wait_until(lambda: job_processes(second.job_id) == [], 30), job_processes(second.job_id)
