"""How a job ends: never a hang, never a hidden failure (two loopback nodes, real processes).

Each test bounds its wait for the chief's exit, and afterwards checks by job
id that no process of the job is left and that its directory is gone.

1. a node's script fails mid-training: the chief's ``with Session()`` block
   closes its session and the job ends within seconds, for every builder
   family; a node whose chief is killed exits by itself
2. a tf.compat.v1 script without a global step trains under every builder
3. a second SIGTERM / Ctrl-C while the job is being stopped does not cut the stop short
4. an API chief that calls ``sys.exit(3)`` mid-training ends the job at once, with its own status
5. a node that fails after the chief's script has finished fails the job
6. SIGTERM while the chief launches a job that keeps checkpoints: 143 (a retryable preemption), no traceback
7. a node whose script built another graph than the chief's fails the job, naming the first difference
"""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from dedupe import builders_for
from jobtools import REPO, SCRIPTS, assert_only_logs_left, job_dir, job_processes, log_dir, wait_until

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
API_SCRIPT = os.path.join(SCRIPTS, "job_linear.py")
RUN_SCRIPT = os.path.join(SCRIPTS, "job_exits.py")
# Parallax plans job_exits.py's and job_linear.py's models (no sparse gradient) as AllReduce (tests/dedupe.py)
FAMILIES = builders_for(["PS", "PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax"], sparse=False)
EXIT_BOUND = 120.0   # seconds a chief gets for its job (two TensorFlow starts, under load); some never ended


def _run_argv(builder, *script_args):
    return ["-m", "autodist", "run", "-r", LOOPBACK, "-s", builder, RUN_SCRIPT] + list(script_args)


def _api_argv(builder, *script_args):
    return [API_SCRIPT, LOOPBACK, "--strategy", builder] + list(script_args)


def _ended(chief, timeout=EXIT_BOUND):
    """The chief's exit code; then nothing of its job is left."""
    code = chief.wait(timeout)
    assert chief.job_id, chief.output()[-4000:]
    assert wait_until(lambda: job_processes(chief.job_id) == [], 10), job_processes(chief.job_id)
    assert_only_logs_left(chief.job_id)
    return code


def _weights(output, prefix):
    found = re.findall("^" + re.escape(prefix) + r"WEIGHTS (.*)$", output, re.M)
    return [float(v) for v in found[-1].split()] if found else None


@pytest.fixture(scope="module")
def one_device_weights():
    """The weights job_exits.py reaches alone (every node feeds the same data, so the job equals it)."""
    done = subprocess.run([sys.executable, RUN_SCRIPT, "--steps", "30", "--no-global-step"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return _weights(done.stdout, "")


# -- 1. a failing node ends the job; an orphaned node ends itself --------------------------------

@pytest.mark.parametrize("builder", FAMILIES)
def test_a_node_failing_mid_training_ends_the_job_within_seconds(chiefs, builder):
    chief = chiefs(_run_argv(builder, "--steps", "100000", "--fail-at", "20"))
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 20$", 150)
    assert _ended(chief) == 1
    output = chief.output()
    assert "autodist: error: worker on 127.0.0.2 failed: its training script exited with code 1" in output
    assert "RuntimeError: failing on purpose at step 20" in output.split("autodist: error:")[-1]


@pytest.mark.parametrize("builder", ["PS", "AllReduce"])
def test_a_node_whose_chief_is_killed_exits_by_itself(chiefs, builder):
    chief = chiefs(_api_argv(builder, "--steps", "100000", "--sleep", "0.05"))
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 3$", 150)
    job = chief.job_id
    assert len(job_processes(job)) >= 1   # the other node's script, which hosts its server (member_server)
    os.killpg(chief.proc.pid, signal.SIGKILL)    # the chief alone: no chance to clean up
    chief.proc.wait(10)
    try:
        assert wait_until(lambda: job_processes(job) == [], 30), job_processes(job)
    finally:
        shutil.rmtree(job_dir(job), ignore_errors=True)   # the chief's to remove; it was killed
        shutil.rmtree(log_dir(job), ignore_errors=True)


# -- 2. no global step ------------------------------------------------------------------------------

@pytest.mark.parametrize("builder", FAMILIES)
def test_a_script_without_a_global_step_trains_under_every_builder(chiefs, builder, one_device_weights):
    chief = chiefs(_run_argv(builder, "--steps", "30", "--no-global-step"))
    assert _ended(chief, 150) == 0, chief.output()[-4000:]
    output = chief.output()
    for prefix in ("", "[127.0.0.2] "):
        got = _weights(output, prefix)
        assert got is not None, output[-4000:]
        assert max(abs(a - b) for a, b in zip(got, one_device_weights)) < 1e-5


# -- 3. a second signal while stopping ------------------------------------------------------------

@pytest.mark.parametrize("mode", ["api", "run"])
@pytest.mark.parametrize("sig, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")],
                         ids=["sigterm-twice", "ctrl-c-twice"])
def test_a_second_signal_while_the_job_stops_does_not_cut_the_stop_short(chiefs, mode, sig, code, name):
    # The other node ignores SIGTERM, so stopping it takes the runner's grace period (5 s) before SIGKILL.
    if mode == "api":
        chief = chiefs(_api_argv("PS", "--steps", "100000", "--sleep", "0.05", "--worker-ignores-sigterm"))
    else:
        chief = chiefs(_run_argv("PS", "--steps", "100000", "--sleep", "0.05", "--ignore-sigterm"))
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 3$", 150)
    chief.signal(sig)
    # the first signal's stop has begun (it says so before stopping anything; the node's grace keeps it going)
    said = "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"
    chief.wait_for(re.escape(said + "; stopping every process of the job"), 60)
    chief.signal(sig)
    exit_code = _ended(chief)
    output = chief.output()
    assert "{} received while stopping the job; still stopping it".format(name) in output
    if mode == "run" or sig == signal.SIGTERM:
        assert exit_code == code
    else:
        assert exit_code != 0     # python's own status for an uncaught KeyboardInterrupt


# -- 4. the chief's own exit -------------------------------------------------------------------------

@pytest.mark.parametrize("builder", ["PS", "AllReduce"])
@pytest.mark.parametrize("where", ["in-scope", "after-scope"])
def test_an_api_chief_exiting_mid_training_ends_the_job_with_its_own_status(chiefs, builder, where):
    extra = ["--loop-outside-scope"] if where == "after-scope" else []
    chief = chiefs(_api_argv(builder, "--steps", "100000", "--chief-exit-at", "10", "--exit-code", "3", *extra))
    chief.wait_for(r"^EXIT 3$", 150)
    assert _ended(chief) == 3
    output = chief.output()
    assert "RemoteWorkerError" not in output and "autodist: error" not in output   # nobody else is blamed
    if where == "in-scope":
        assert "the chief's script is exiting with code 3; stopping every process of the job" in output
    else:
        assert re.search(r"the chief's script has ended while 127\.0\.0\.2 still waits for it \(127\.0\.0\.2: "
                         r"session call \d+ running for \d+ s", output), output[-3000:]


# -- 5. a node failing after the chief's script finished ---------------------------------------------

@pytest.mark.parametrize("mode", ["api", "run"])
@pytest.mark.parametrize("delay", [0.0, 3.0], ids=["at-once", "later"])
def test_a_node_failing_after_the_chief_finished_fails_the_job(chiefs, mode, delay):
    if mode == "api":
        chief = chiefs(_api_argv("PS", "--steps", "5", "--worker-fail-at-end", "--fail-delay", str(delay)))
    else:
        chief = chiefs(_run_argv("PS", "--steps", "5", "--fail-at-end", "--fail-delay", str(delay)))
    assert _ended(chief) == 1
    output = chief.output()
    tail = output[output.rindex("worker on 127.0.0.2 failed"):]
    assert "its training script exited with code 1" in tail
    assert tail.rstrip().endswith("AssertionError: the checked file is missing"), tail


# -- 6. SIGTERM during the launch of a job that keeps checkpoints -------------------------------------

ELASTIC_SCRIPT = os.path.join(SCRIPTS, "elastic_train.py")


@pytest.mark.parametrize("mode", ["run", "elastic"])
def test_sigterm_while_the_chief_launches_a_checkpointing_job_exits_143(chiefs, tmp_path, mode):
    # The chief announces the job before it starts the other node's script and waits for it: a SIGTERM then
    # reaches the checkpoint's save before any session exists (before the fix: AttributeError, exit 1).
    elastic = ["--elastic"] if mode == "elastic" else []
    chief = chiefs(["-m", "autodist", "run", "-r", LOOPBACK, "-s", "PS"] + elastic + [
        ELASTIC_SCRIPT, "--steps", "5", "--checkpoint-dir", str(tmp_path / "ckpt")])
    chief.wait_for(r"\[autodist\] job \S+: 2 nodes", 150)
    chief.signal(signal.SIGTERM)
    assert _ended(chief) == 143, chief.output()[-4000:]
    assert "Traceback" not in chief.output() and "AttributeError" not in chief.output(), chief.output()[-4000:]


# -- 7. a node that captured another graph than the chief ---------------------------------------------

def test_a_node_that_built_another_graph_fails_the_job_naming_the_difference(chiefs):
    # another learning rate on the other node: before, the job trained two different models without a word
    chief = chiefs(_api_argv("PS", "--steps", "3", "--worker-lr", "0.5"))
    assert _ended(chief) == 1
    output = chief.output()
    assert "worker on 127.0.0.2 failed" in output, output[-3000:]
    assert "GraphMismatchError: 127.0.0.2 captured another graph than the chief 127.0.0.1: the optimizer " \
           "GradientDescentOptimizer's learning_rate: 0.1 on the chief, 0.5 here" in output, output[-3000:]
