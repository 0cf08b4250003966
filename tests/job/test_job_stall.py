"""A node stopped with SIGSTOP (alive, silent) is reported as a stall within the stall timeout, and nothing is left.

The chief reads the weights twice after each step (session calls the other
node never makes): the report still puts both nodes at the same training step.
"""
import re
import os
import signal
import time

import pytest

from jobtools import REPO, SCRIPTS, job_dir, job_processes, wait_until
from test_job_failures import _pgid_of

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
SCRIPT = os.path.join(SCRIPTS, "job_linear.py")
STALL_TIMEOUT = 6.0


def test_a_stopped_node_is_named_in_a_stall_report_and_the_job_ends(chiefs):
    chief = chiefs([SCRIPT, LOOPBACK, "--strategy", "AllReduce", "--steps", "100000", "--sleep", "0.1",
                    "--stall-timeout", str(STALL_TIMEOUT), "--chief-reads", "2"])
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 15$", 150)   # its reports have come for a while
    pgid = _pgid_of(chief.job_id)
    stopped_at = time.monotonic()
    os.killpg(pgid, signal.SIGSTOP)
    try:
        code = chief.wait(STALL_TIMEOUT + 60)
    finally:
        if chief.proc.poll() is None:
            os.killpg(pgid, signal.SIGCONT)
    hit = chief.find(r"stalled: ")
    assert hit is not None, chief.output()[-4000:]
    print("stall reported after {:.1f} s".format(hit[0] - stopped_at))
    assert code != 0
    report = chief.output()[chief.output().index("stalled: "):]
    # Not before its timeout, by the report's own clock (how long before the stop the last step began or the last
    # report came depends on the machine's load): what fired it, a node's call or a node's silence, had lasted the
    # stall timeout. The report prints each node's call and silence, the figures the watch compared with it, to 0.1 s.
    figures = [float(f) for f in re.findall(r"(?:in training step \d+|no report|outside the training steps) "
                                            r"for (\d+\.\d) s", report)]
    assert figures and max(figures) >= STALL_TIMEOUT, report
    assert "(stall timeout {:.0f} s)".format(STALL_TIMEOUT) in report, report
    assert "127.0.0.2: has not reached training step" in report and "process alive" in report
    # The worker printed STEP i after its (i + 1)th step; the chief waits in step i + 2 (i + 3 if the stop
    # caught the worker inside step i + 2 after the chief got its part). Counted by session calls, the
    # chief (3 a step) would be near step 3 (i + 2).
    last = max(int(n) for n in re.findall(r"^\[127\.0\.0\.2\] STEP (\d+)$", chief.output(), re.M))
    waits = int(re.search(r"127\.0\.0\.1 \(the chief\): waiting in training step (\d+)", report).group(1))
    assert last + 2 <= waits <= last + 3, (last, report)
    behind = int(re.search(r"127\.0\.0\.2: has not reached training step {}: last completed step (\d+),"
                           .format(waits), report).group(1))
    assert behind <= waits - 1   # its last report may be up to a second older than the stop
    assert "(stopped or frozen?)" in report and "STEP 15" in report
    assert "StallError: worker on 127.0.0.2 stalled" in chief.output()
    assert wait_until(lambda: job_processes(chief.job_id) == [], 10), job_processes(chief.job_id)
    assert not os.path.exists(job_dir(chief.job_id))


def test_a_node_gives_up_on_a_stopped_chief_within_the_stall_timeout_and_its_grace(chiefs):
    """The chief (stopped) cannot report its own stall: the other node bounds its step itself."""
    from autodist.runtime.watch.stall import MEMBER_GRACE
    timeout = 4.0
    chief = chiefs([SCRIPT, LOOPBACK, "--strategy", "AllReduce", "--steps", "100000", "--sleep", "0.1",
                    "--stall-timeout", str(timeout)])
    chief.wait_for(r"\[127\.0\.0\.2\] STEP 5$", 150)
    worker = _pgid_of(chief.job_id)
    os.kill(chief.proc.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        gone = wait_until(lambda: worker not in job_processes(chief.job_id), timeout + MEMBER_GRACE + 60)
        print("the other node gave up after {:.1f} s".format(time.monotonic() - stopped_at))
    finally:
        os.kill(chief.proc.pid, signal.SIGCONT)
    assert gone   # within the bound of the wait above (a hang guard)
    code = chief.wait(60)
    assert code != 0
    assert "StallError: worker on 127.0.0.1 stalled: 127.0.0.2 has waited" in chief.output(), chief.output()[-3000:]
    # not before the stall timeout and its grace, by the node's own clock: the call it gave up on had run that long
    # (when that call began, relative to the stop, depends on the machine's load)
    gave_up = int(re.search(r"127\.0\.0\.2 has waited (\d+) s", chief.output()).group(1))
    assert gave_up >= timeout + MEMBER_GRACE, chief.output()[-3000:]
    assert "and the chief has not ended the job" in chief.output()
    assert wait_until(lambda: job_processes(chief.job_id) == [], 10), job_processes(chief.job_id)
    assert not os.path.exists(job_dir(chief.job_id))
