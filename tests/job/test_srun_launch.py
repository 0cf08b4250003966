"""Jobs whose other node is started with srun: the stand-in srun (tests/runner/fake_srun) in a fake allocation.

The allocation is 127.0.0.[1-2] with this process on 127.0.0.1; the stand-in
runs each step here, so the job is two loopback nodes whose second node's
server and script came through srun.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from jobtools import job_processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_SRUN_DIR = os.path.join(ROOT, "tests", "runner", "fake_srun")
UNMODIFIED = os.path.join(ROOT, "examples", "unmodified_train.py")


def _in_allocation(tmp_path, *argv, timeout=240):
    env = dict(os.environ, PATH=FAKE_SRUN_DIR + os.pathsep + os.environ["PATH"], SLURM_JOB_NODELIST="127.0.0.[1-2]",
               SLURMD_NODENAME="127.0.0.1", SLURM_JOB_CPUS_PER_NODE="1(x2)", FAKE_SRUN_LOG=str(tmp_path / "srun.log"))
    done = subprocess.run([sys.executable] + list(argv), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    steps = [" ".join(json.loads(line)) for line in (tmp_path / "srun.log").read_text().splitlines()]
    assert steps and all("--nodelist=127.0.0.2" in step and "--overlap" in step for step in steps), steps
    # one process per node: the script's step hosts the node's TensorFlow server (runtime.launch.member_server)
    assert any("AUTODIST_JOB=" in step for step in steps), steps
    assert not any("autodist.runtime.launch.server" in step for step in steps), steps
    job_id = re.search(r"\[autodist\] job (\S+):", output).group(1)
    assert job_processes(job_id) == []
    return output, steps


@pytest.mark.slow
def test_the_linear_example_trains_on_two_nodes_started_through_srun(tmp_path):
    output, steps = _in_allocation(tmp_path, os.path.join(ROOT, "examples", "linear_regression.py"), "--steps", "40")
    errors = [float(v) for v in re.findall(r"max weight error ([0-9.]+)", output)]
    assert len(errors) == 2 and max(errors) < 0.5, output[-4000:]   # both nodes, the same weights
    assert "[127.0.0.2] [node 1] max weight error" in output
    assert "step 40/40" in output and "step 41/40" not in output
    assert any("linear_regression.py" in step for step in steps)


@pytest.mark.slow
def test_autodist_run_without_a_spec_uses_the_allocation(tmp_path):
    output, steps = _in_allocation(tmp_path, "-m", "autodist", "run", UNMODIFIED, "--steps", "3")
    assert "2 nodes" in output
    assert any("--spec-json" in step and "unmodified_train.py" in step for step in steps), steps
