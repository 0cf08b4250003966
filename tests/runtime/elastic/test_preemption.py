"""A member's answer to a preemption notice, in a process of its own (no TensorFlow).

The first notice is reported to the chief (a framed report with ``leaving``)
and the process goes on; once the job's directory is gone (the chief stopping
its job), the signal ends the process at once, as without a handler; a node
left waiting past its grace leaves by itself.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from autodist.runner.frames import FrameSplitter
from autodist.runtime.elastic.preemption import install_member_handler, signal_number

MEMBER = textwrap.dedent("""
    import os, sys, time
    from autodist.runtime.context import JobContext
    from autodist.runtime.watch.step_report import StepMonitor
    from autodist.runtime.elastic.preemption import install_member_handler
    context = JobContext(job_id="j", address="127.0.0.2", servers={"127.0.0.1": "a:1", "127.0.0.2": "b:2"},
                         chief="127.0.0.1", strategy_path="s", workdir=sys.argv[1])
    env = {"AUTODIST_PREEMPTION": "SIGUSR1 " + sys.argv[2]}
    assert install_member_handler(env, StepMonitor(), context) is not None
    print("ready", flush=True)
    for _ in range(600):
        time.sleep(0.05)
""")


def _member(tmp_path, grace):
    workdir = tmp_path / "job"
    workdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", MEMBER, str(workdir), str(grace)], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    return proc, workdir


def _reports(proc, count):
    splitter, found = FrameSplitter(), []
    while len(found) < count:
        chunk = os.read(proc.stdout.fileno(), 4096)
        # the member's own loop ends it within 30 s: its output's end is this wait's bound
        assert chunk, "the member exited (code {}) before {} report(s), got {}".format(proc.wait(10), count, found)
        found += splitter.split(chunk.decode())[1]
    return found


def test_a_notice_is_reported_and_the_jobs_stop_ends_the_process(tmp_path):
    proc, workdir = _member(tmp_path, grace=60)
    try:
        proc.send_signal(signal.SIGUSR1)
        assert _reports(proc, 1)[0]["leaving"] == "SIGUSR1"
        time.sleep(0.5)
        assert proc.poll() is None                   # it keeps serving the job
        workdir.rmdir()                              # the chief stops the job: its directory goes first
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(10) == -signal.SIGUSR1
    finally:
        proc.kill()


def test_a_node_left_waiting_leaves_after_its_grace(tmp_path):
    proc, _ = _member(tmp_path, grace=1)
    try:
        started = time.monotonic()   # before the signal: its grace cannot have begun earlier
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(20) == -signal.SIGUSR1
        assert time.monotonic() - started >= 1.0
    finally:
        proc.kill()


def test_only_members_of_elastic_jobs_answer_notices():
    assert install_member_handler({}, None, None) is None
    assert signal_number("term") == signal.SIGTERM and signal_number("SIGUSR2") == signal.SIGUSR2
    assert json.dumps(signal_number("15")) == "15"
