"""No wait for another node is without a bound, even for a node stopped, frozen or never come.

    member_stall     a launched node's call running past the stall timeout (+ grace) is the chief's stall
    run_init         the job's init waits for every server; TensorFlow bounds the step,
                     not the session's creation, which waits for a silent peer forever
    read_node_file   the chief's timeline reads another node's file through a session: the same
"""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from autodist.errors import StallError
from autodist.runtime.watch.stall import member_stall
from autodist.runtime.watch.step_report import StepMonitor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_call_within_the_stall_timeout_and_its_grace_is_no_stall():
    monitor = StepMonitor()
    assert member_stall(monitor, "127.0.0.2", "127.0.0.1", 0.2, grace=0.1) is None   # no call in flight
    monitor.started(sync=True)
    assert member_stall(monitor, "127.0.0.2", "127.0.0.1", 0.2, grace=0.1) is None
    assert member_stall(monitor, "127.0.0.2", "127.0.0.1", None, grace=0.0) is None  # no stall timeout: none


def test_a_call_past_the_stall_timeout_names_the_chief():
    monitor = StepMonitor()
    for _ in range(4):
        monitor.started(sync=True)
        monitor.finished()
    monitor.started(sync=True)
    time.sleep(0.35)
    error = member_stall(monitor, "127.0.0.2", "127.0.0.1", 0.2, grace=0.1)
    assert isinstance(error, StallError) and error.host == "127.0.0.1"
    # the seconds waited are the sleep's and whatever a loaded machine adds to it: any whole number
    assert re.match(r"worker on 127\.0\.0\.1 stalled: 127\.0\.0\.2 has waited \d+ s in training step 5 "
                    r"\(stall timeout 0 s\), and the chief has not ended the job", str(error)), str(error)


_NO_PEER = textwrap.dedent("""
    import time
    import tensorflow as tf
    from autodist.errors import SessionError
    from autodist.runner import free_port
    from autodist.runtime.context import JobContext
    from autodist.runtime.session import node as node_session
    from autodist.runtime.session.node import run_init
    from autodist.runtime.watch.timeline import read_node_file
    from autodist.spec.cluster import start_server, node_config

    # Task 1 serves; task 0 (the chief's address) has a port nobody listens on: its server never came.
    servers = {"127.0.0.1": "localhost:%d" % free_port(), "127.0.0.2": "localhost:%d" % free_port()}
    context = JobContext(job_id="j", address="127.0.0.2", servers=servers, chief="127.0.0.1", strategy_path="")
    start_server(context.cluster_spec(), 1, node_config(1, 0))
    graph = tf.Graph()
    with graph.as_default(), tf.device("/job:worker/task:1"):
        op = tf.no_op(name="init")
    session = tf.compat.v1.Session(context.target, graph=graph, config=node_config(1, 0))
    node_session.INIT_GRACE = 0.5
    started = time.monotonic()
    try:
        run_init(session, ["init"], context, None, init_timeout=1.0)
        print("RETURNED")
    except SessionError as e:
        print("WAITED %.1f" % (time.monotonic() - started))
        print(e)
    started = time.monotonic()
    data = read_node_file(context.target, 0, "/tmp/no-such-trace.json", time.monotonic() + 1.0)
    print("READ %r %.1f" % (data, time.monotonic() - started))
""")


@pytest.mark.slow   # a TensorFlow process of its own: a creation that hangs must not hang the test run
def test_the_init_and_the_timeline_give_up_on_a_peer_whose_server_never_answers():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _NO_PEER], env=env, capture_output=True, text=True, timeout=90)
    out = done.stdout
    assert "WAITED" in out, out + done.stderr[-3000:]
    waited = float(out.split("WAITED ")[1].split()[0])
    # it waited its init timeout (a lower bound: time does not run fast); that it gave up at all is the outcome
    # (an unbounded session creation never returns: subprocess.run's timeout is the hang guard, not a speed claim)
    assert waited >= 1.0, out
    assert ("node 127.0.0.2: the job did not come up within 1 s: waited for the TensorFlow servers and distributed "
            "sessions of 127.0.0.1 (the chief)") in out
    read = out.split("READ ")[1].split()
    assert read[0] == "None", out   # gave up by its deadline: no data (a read left waiting hits the hang guard)
