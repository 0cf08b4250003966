"""A job whose worker, server or connection dies, or whose chief gets Ctrl-C or SIGTERM, stops completely.

The chief must notice (within seconds; the tests bound their wait, a hang guard, and check what
happened, not how fast), also while it is blocked in ``sess.run``
(the other nodes pause between steps, the chief does not) or busy outside
the session (a long pause between steps), exit non-zero with
a ``RemoteWorkerError`` naming the host, the exit code and the last log lines,
and leave no process of the job behind on any node.
"""
import os
import re
import signal
import time

import pytest

from jobtools import REPO, SCRIPTS, assert_only_logs_left, job_processes, wait_until
from test_job_concurrent import check_numbers

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
SCRIPT = os.path.join(SCRIPTS, "job_linear.py")
DETECTION_BOUND = 60.0   # s the chief gets to notice and exit: a hang guard, not a speed claim


def _cmdline(pid):
    with open("/proc/{}/cmdline".format(pid), "rb") as f:
        return f.read().replace(b"\0", b" ").decode("utf-8", "replace")


def _pgid_of(job_id):
    """The process group of the other node's script (which hosts its server), found by the job id."""
    for pid in job_processes(job_id):
        command = _cmdline(pid)
        if "python" in command.split()[0] and os.getpgid(pid) == pid:
            return pid
    raise AssertionError("no script of job {} among {}".format(job_id, {p: _cmdline(p) for p in job_processes(job_id)}))


def _start_training(chiefs, spec, strategy="AllReduce", extra=()):
    chief = chiefs([SCRIPT, spec, "--strategy", strategy, "--steps", "100000", "--sleep", "0.1"] + list(extra))
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 3$", 150)
    assert chief.job_id and job_processes(chief.job_id)
    return chief


def _assert_stopped(chief, killed_at, *expected):
    """The chief reported a RemoteWorkerError naming the host and its end, exited non-zero and nothing is left.

    The chief's wait is the hang guard (a chief that never notices keeps training, or stays blocked in
    ``sess.run``, forever); how soon it noticed is printed for the record, not asserted (a loaded machine)."""
    code = chief.wait(DETECTION_BOUND)
    hit = chief.find(r"RemoteWorkerError: ")
    assert hit is not None, chief.output()[-4000:]
    print("detected after {:.2f} s".format(hit[0] - killed_at))
    assert code != 0
    message = chief.output()[chief.output().index("RemoteWorkerError: "):]
    for text in ("127.0.0.2",) + expected:
        assert text in message
    assert "last lines of its log:" in message
    assert wait_until(lambda: job_processes(chief.job_id) == [], 5), job_processes(chief.job_id)
    assert_only_logs_left(chief.job_id)
    return message


def test_killed_worker_script_stops_its_job_and_only_its_job(chiefs):
    # Another job on the same nodes, training while the first one dies.
    bystander = chiefs([SCRIPT, LOOPBACK, "--seed", "3", "--steps", "30", "--sleep", "0.5"])
    chief = _start_training(chiefs, LOOPBACK)
    bystander.wait_for(r"\[127\.0\.0\.2\] STEP 0$", 150)
    pgid = _pgid_of(chief.job_id)
    assert bystander.proc.poll() is None and bystander.find(r"STEP 29$") is None
    killed_at = time.monotonic()
    os.killpg(pgid, signal.SIGKILL)
    message = _assert_stopped(chief, killed_at, "training script exited with code 137 (killed by SIGKILL)")
    assert bystander.proc.poll() is None   # still training
    assert re.search(r"\nSTEP \d+\n", message)  # the worker's own last output lines
    assert bystander.wait(120) == 0, bystander.output()[-4000:]
    check_numbers(bystander, seed=3, steps=30)
    assert job_processes(bystander.job_id) == []


@pytest.mark.ssh
def test_killed_node_process_over_ssh_stops_a_chief_busy_outside_the_session(chiefs, ssh_spec):
    # The node's TensorFlow server lives in its script's process (runtime.launch.member_server): one kill ends both.
    chief = _start_training(chiefs, ssh_spec(remote=("127.0.0.2",)), strategy="PS",
                            extra=["--chief-pause-at", "4", "--chief-pause", "120"])
    chief.wait_for(r"^PAUSE$", 60)
    assert all("autodist.runtime.launch.server" not in _cmdline(p) for p in job_processes(chief.job_id))
    pgid = _pgid_of(chief.job_id)
    killed_at = time.monotonic()
    os.killpg(pgid, signal.SIGKILL)
    _assert_stopped(chief, killed_at, "training script exited with code 137 (killed by SIGKILL)")
    # Noticed while the chief was busy outside the session: the error reached it in its pause (the traceback
    # ends in the script's sleep) and it never got to its next step (STEP 5 would follow the 120 s pause).
    output = chief.output()
    before = output[:output.index("RemoteWorkerError: ")]
    assert "time.sleep(args.chief_pause)" in before, output[-4000:]
    assert not re.search(r"^STEP 5$", before, re.M), output[-4000:]


@pytest.mark.ssh
def test_dropped_ssh_connection_stops_the_job(chiefs, ssh_spec, sshd):
    chief = _start_training(chiefs, ssh_spec(remote=("127.0.0.2",)))
    # The per-connection sshd processes are children of the test's sshd: killing them
    # cuts the chief's only connection to 127.0.0.2 without a goodbye.
    sessions = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == sshd.process.pid]
    assert sessions
    killed_at = time.monotonic()
    for pid in sessions:
        os.kill(pid, signal.SIGKILL)
    _assert_stopped(chief, killed_at, "connection to it was lost")


def _ppid(pid):
    try:
        with open("/proc/{}/stat".format(pid), "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


@pytest.mark.parametrize("sig, code, said", [
    (signal.SIGINT, None, "KeyboardInterrupt"),
    (signal.SIGTERM, 143, "terminated (SIGTERM); stopping every process of the job"),
], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_on_the_chief_stops_every_node(chiefs, sig, code, said):
    chief = _start_training(chiefs, LOOPBACK)
    chief.signal(sig)
    exit_code = chief.wait(30)
    assert exit_code != 0 and (code is None or exit_code == code), (exit_code, chief.output()[-3000:])
    assert said in chief.output()
    assert wait_until(lambda: job_processes(chief.job_id) == [], 5), job_processes(chief.job_id)
    assert_only_logs_left(chief.job_id)
