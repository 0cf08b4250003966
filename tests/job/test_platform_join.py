"""Jobs the platform starts: every process runs the same command and joins (``autodist.runtime.join``).

Processes are started here as a platform would start them, by hand, with the
environment of each source (TF_CONFIG as Kubernetes' TFJob sets it; Slurm's
task variables as ``srun --ntasks`` sets them; MPI's ranks with the chief's
address), in a shuffled order half a second apart (two seconds for the
three-node TF_CONFIG job), on loopback addresses. Training equals one device; a killed process makes every other one
stop with the retry status, and a restart of all of them resumes from the
checkpoint; a process that never comes up makes the others stop at the
readiness bound, naming it.
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from autodist.runner import free_ports
from autodist.runtime.join import EXIT_RETRY
from jobtools import REPO, SCRIPTS, linear_reference

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(SCRIPTS, "join_linear.py")
ADDRESSES = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def _consecutive_ports(count, tries=50):
    """A base port with ``count`` free ports from it (the rule-based sources take base + rank)."""
    import socket
    for _ in range(tries):
        base = free_ports(count=1)[0]
        if base + count > 60000:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("0.0.0.0", port))
                sockets.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no {} consecutive free ports".format(count))


def tf_config_envs(nodes):
    ports = free_ports(count=nodes)
    servers = ["{}:{}".format(a, p) for a, p in zip(ADDRESSES, ports)]
    cluster = {"chief": servers[:1], "worker": servers[1:]}
    tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in range(nodes - 1)]
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})} for task in tasks]


def slurm_envs(nodes):
    """What ``srun --ntasks=N`` gives each task (a stand-in: the allocation is these loopback hosts)."""
    base = _consecutive_ports(nodes)
    hosts = "127.0.0.[1-{}]".format(nodes)
    return [{"SLURM_PROCID": str(r), "SLURM_NTASKS": str(nodes), "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77",
             "SLURM_STEP_NODELIST": hosts, "SLURM_JOB_NODELIST": hosts, "SLURMD_NODENAME": ADDRESSES[r],
             "AUTODIST_PORT": str(base)} for r in range(nodes)]


def mpi_envs(nodes):
    """What ``mpirun -np N -x AUTODIST_CHIEF_ADDRESS`` gives each rank (Open MPI's variables)."""
    base = _consecutive_ports(nodes + 1)
    return [{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(nodes),
             "AUTODIST_CHIEF_ADDRESS": ADDRESSES[0], "AUTODIST_ADVERTISE_ADDRESS": ADDRESSES[r],
             "AUTODIST_PORT": str(base)} for r in range(nodes)]


class Processes:
    """The job's processes, started in ``order`` with ``delay`` s between them; every one killed at the end."""

    def __init__(self, envs, args, order, delay, tmp_path):
        self.procs = {}
        self.logs = {}
        base = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    TF_CPP_MIN_LOG_LEVEL="2", AUTODIST_READY_TIMEOUT="90")
        for k, rank in enumerate(order):
            if k:
                time.sleep(delay)
            self.logs[rank] = tmp_path / "process-{}-{}.log".format(rank, time.monotonic_ns())
            with open(self.logs[rank], "w") as out:
                self.procs[rank] = subprocess.Popen([sys.executable, SCRIPT] + list(args), env=dict(base, **envs[rank]),
                                                    stdout=out, stderr=subprocess.STDOUT, cwd=str(tmp_path),
                                                    start_new_session=True)

    def output(self, rank):
        return self.logs[rank].read_text()

    def wait(self, timeout):
        """``{rank: exit status}`` once every process ended, or fail naming who did not within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        for rank, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail("process {} did not end within {:.0f} s:\n{}".format(rank, timeout, self.output(rank)))
        return {rank: proc.returncode for rank, proc in self.procs.items()}

    def kill(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def results(self):
        found = {}
        for rank in self.procs:
            for line in self.output(rank).splitlines():
                if line.startswith("RESULT "):
                    found[rank] = json.loads(line[len("RESULT "):])
        return found


@pytest.fixture
def launch(tmp_path):
    started = []

    def start(envs, args, order=None, delay=0.5):
        order = list(order) if order is not None else random.Random(len(started)).sample(range(len(envs)), len(envs))
        processes = Processes(envs, args, order, delay, tmp_path)
        started.append(processes)
        return processes
    yield start
    for processes in started:
        processes.kill()


def _check_trained_like_one_device(processes, steps, timeout=180):
    statuses = processes.wait(timeout)
    assert set(statuses.values()) == {0}, {r: processes.output(r)[-2000:] for r in statuses}
    results = processes.results()
    assert sorted(results) == sorted(statuses)
    _, expected = linear_reference(0, steps)
    for result in results.values():
        np.testing.assert_allclose(result["weights"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("builder,nodes", [("PS", 2), ("AllReduce", 3), ("AutoStrategy", 2)])
def test_tf_config_processes_started_in_any_order_train_like_one_device(launch, builder, nodes):
    processes = launch(tf_config_envs(nodes), ["--strategy", builder, "--steps", "4"],
                       delay=2.0 if nodes == 3 else 0.5)
    _check_trained_like_one_device(processes, 4)
    assert "processes up" in processes.output(0)


def test_srun_tasks_train_like_one_device(launch):
    _check_trained_like_one_device(launch(slurm_envs(2), ["--strategy", "PSLoadBalancing", "--steps", "4"]), 4)


def test_mpi_ranks_exchange_their_addresses_and_train_like_one_device(launch):
    _check_trained_like_one_device(launch(mpi_envs(3), ["--strategy", "AllReduce", "--steps", "4"]), 4)


def test_keras_fit_in_a_platform_started_job_trains_like_one_device(launch):
    _check_trained_like_one_device(launch(tf_config_envs(2), ["--strategy", "AllReduce", "--steps", "3",
                                                              "--keras"]), 3)


def test_a_killed_process_stops_the_job_with_the_retry_status_and_a_restart_resumes(launch, tmp_path):
    envs = tf_config_envs(3)
    args = ["--strategy", "PS", "--steps", "12", "--sleep", "0.2", "--checkpoint-dir", str(tmp_path / "ckpt")]
    first = launch(envs, args, order=[0, 1, 2], delay=0.5)
    deadline = time.monotonic() + 120
    while "STEP 4" not in first.output(0) and time.monotonic() < deadline and first.procs[0].poll() is None:
        time.sleep(0.1)
    assert "STEP 4" in first.output(0), first.output(0)
    os.killpg(first.procs[1].pid, signal.SIGKILL)
    statuses = first.wait(60)   # a bound on the wait, not a claim about speed: the claim is the status and why
    assert statuses[0] == EXIT_RETRY and statuses[2] == EXIT_RETRY, {r: first.output(r)[-1500:] for r in (0, 2)}
    assert "is gone" in first.output(0) + first.output(2)
    second = launch(envs, args, order=[2, 0, 1], delay=1.0)
    _check_trained_like_one_device(second, 12)
    assert "STEP 1\n" not in second.output(0)   # it resumed from a checkpoint, not from the start


def test_a_process_that_never_comes_up_stops_the_others_at_the_readiness_bound(launch, tmp_path):
    envs = tf_config_envs(2)
    for env in envs:
        env["AUTODIST_READY_TIMEOUT"] = "6"
    processes = launch(envs[:1], ["--steps", "2"], order=[0])
    statuses = processes.wait(60)
    assert statuses[0] != 0
    output = processes.output(0)
    assert "did not come together within 6 s" in output and "127.0.0.2" in output


@pytest.fixture
def foreign(tmp_path):
    """``hold(server, kind)``: something that is not this job's process listens at ``server`` ("host:port"): a
    program that only accepts connections ("listener"), or a TensorFlow server of another job ("another-job").
    Everything is stopped at the end."""
    import socket
    import threading
    held = []

    def hold(server, kind):
        host, port = server.rsplit(":", 1)
        if kind == "listener":
            sock = socket.socket()
            sock.bind((host, int(port)))
            sock.listen(16)
            accepted = []
            threading.Thread(target=lambda: [accepted.append(sock.accept()) for _ in range(1000)], daemon=True).start()
            held.append(sock.close)
            return
        code = ("import sys, time, tensorflow as tf\nserver = tf.distribute.Server({'other': [sys.argv[1]]}, "
                "job_name='other', task_index=0)\nprint('serving', flush=True)\ntime.sleep(600)\n")
        proc = subprocess.Popen([sys.executable, "-c", code, server], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), start_new_session=True)
        held.append(lambda: (os.killpg(proc.pid, signal.SIGKILL), proc.wait(10)))
        assert proc.stdout.readline().strip() == "serving"
    yield hold
    for stop in held:
        stop()


@pytest.mark.parametrize("kind, reason", [
    ("listener", "it accepts connections but does not answer as a TensorFlow server"),
    ("another-job", "its TensorFlow server is not this job's process of task 0")])
def test_something_else_on_the_chiefs_port_is_not_taken_for_the_chief(launch, foreign, kind, reason):
    # before: "2 of 2 processes up", then a silent wait for the chief's plan
    envs = tf_config_envs(2)
    foreign(json.loads(envs[0]["TF_CONFIG"])["cluster"]["chief"][0], kind)
    envs[1]["AUTODIST_READY_TIMEOUT"] = "16"   # one "waiting for" line (every 10 s), then the bound
    processes = launch(envs[1:], ["--steps", "2"], order=[0])
    assert processes.wait(90)[0] != 0
    output = processes.output(0)
    assert "processes up" not in output, output[-3000:]
    assert re.search(r"waiting for 1 of 1 processes \(\d+ s of 16\): 127\.0\.0\.1 \(127\.0\.0\.1:\d+\): " +
                     re.escape(reason), output), output[-3000:]
    assert "did not come together within 16 s: still waiting for 127.0.0.1" in output


def test_a_process_that_built_another_graph_stops_the_job_naming_the_difference(launch):
    # the same script, another argument on one process: before, both exited 0 with different weights
    envs = tf_config_envs(2)
    envs[1]["JOIN_LINEAR_LR"] = "0.5"
    processes = launch(envs, ["--strategy", "PS", "--steps", "4"], order=[0, 1], delay=0.5)
    statuses = processes.wait(120)
    assert statuses[1] == 1 and statuses[0] == EXIT_RETRY, {r: processes.output(r)[-2000:] for r in statuses}
    assert re.search(r"GraphMismatchError: 127\.0\.0\.2 captured another graph than the chief 127\.0\.0\.1: the "
                     r"optimizer GradientDescentOptimizer's learning_rate: 0\.1 on the chief, 0\.5 here",
                     processes.output(1)), processes.output(1)[-3000:]
    assert "RESULT" not in processes.output(0) + processes.output(1)
