"""Stall reports: who held a step up, found from the nodes' reports (no processes), and by the coordinator."""
import io
import os
import sys
import threading
import time

from autodist.errors import RemoteWorkerError, StallError
from autodist.runner.base import wait_until
from autodist.runtime.watch.stall import NodeState, find_stall
from autodist.runtime.watch.step_report import StepMonitor


def _chief(now, steps, busy):
    return NodeState("127.0.0.1", (now, {"steps": steps, "busy": busy, "step_s": 0.01}), chief=True)


def _node(address, received, steps, busy, alive=True, tail=""):
    return NodeState(address, (received, {"steps": steps, "busy": busy, "step_s": 0.01}), alive, tail)


def test_nothing_is_reported_while_steps_progress():
    now = 100.0
    assert find_stall([_chief(now, 5, 0.2), _node("127.0.0.2", now - 0.5, 5, 0.1)], now, 10) is None


def _steps(address, received, calls, steps, busy, in_step, chief=False):
    """A report of a node that made ``calls`` session calls, ``steps`` of them training steps."""
    data = {"steps": calls, "sync": steps, "in_sync": in_step, "busy": busy, "step_s": 0.01}
    return NodeState(address, (received, data), chief=chief)


def test_a_chiefs_extra_calls_do_not_make_a_waiting_node_look_behind():
    # The chief read a variable after each of its 41 steps (82 calls) and waits in step 42 with
    # 127.0.0.3; 127.0.0.2 stopped after step 41. Counted by calls, 127.0.0.3 (41 calls) was "behind".
    now = 100.0
    chief = _steps("127.0.0.1", now, 82, 41, 10.5, True, chief=True)
    stopped = _steps("127.0.0.2", now - 11, 41, 41, 0.0, False)
    waiting = _steps("127.0.0.3", now - 0.3, 41, 41, 10.2, True)
    error = find_stall([chief, stopped, waiting], now, 10)
    assert error.host == "127.0.0.2"
    lines = str(error).splitlines()
    assert "127.0.0.1 (the chief) has waited 10 s in training step 42" in lines[0]
    assert lines[1].startswith("  127.0.0.2: has not reached training step 42: last completed step 41")
    assert "  127.0.0.3: waiting in training step 42 for 10.5 s" in lines
    assert "  127.0.0.1 (the chief): waiting in training step 42 for 10.5 s" in lines
    assert not any("127.0.0.3: has not reached" in line for line in lines)


def test_a_node_in_a_chief_only_call_has_not_reached_the_step_the_others_wait_in():
    now = 100.0
    chief = _steps("127.0.0.1", now, 30, 15, 12.0, False, chief=True)   # stuck reading, after step 15
    worker = _steps("127.0.0.2", now - 0.2, 15, 15, 11.8, True)
    error = find_stall([chief, worker], now, 10)
    assert error.host == "127.0.0.1"
    assert "127.0.0.2 has waited 12 s in training step 16" in str(error)
    assert ("127.0.0.1 (the chief): has not reached training step 16: last completed step 15, in a session "
            "call outside the training steps for 12.0 s") in str(error)


def test_a_node_stopped_inside_a_step_is_named_not_the_node_waiting_for_it():
    now = 100.0
    stopped = _steps("127.0.0.2", now - 12, 7, 7, 0.4, True)   # its call seems to run on: 12.4 s
    chief = _steps("127.0.0.1", now, 7, 7, 11.0, True, chief=True)
    error = find_stall([chief, stopped], now, 10)
    assert error.host == "127.0.0.2" and "127.0.0.1 (the chief) has waited 11 s in training step 8" in str(error)


def test_a_stopped_node_is_named_with_its_last_step_and_log():
    now = 100.0
    stopped = _node("127.0.0.2", now - 11, 41, 0.0, tail="step 40\nstep 41\n")
    error = find_stall([_chief(now, 41, 10.5), stopped, _node("127.0.0.3", now - 0.3, 41, 10.2)], now, 10)
    assert isinstance(error, StallError) and isinstance(error, RemoteWorkerError)
    assert error.host == "127.0.0.2"
    lines = str(error).splitlines()
    assert lines[0].startswith("worker on 127.0.0.2 stalled: 127.0.0.1 (the chief) has waited 10 s in training step 42")
    assert ("  127.0.0.2: has not reached training step 42: last completed step 41, not in a session call, process alive, "
            "no report for 11.0 s (stopped or frozen?); last lines of its log:") in lines
    assert "    | step 41" in lines
    assert "  127.0.0.3: waiting in training step 42 for 10.5 s" in lines


def test_a_node_that_stops_reporting_is_a_stall_even_when_nobody_waits_yet():
    now = 100.0
    error = find_stall([_chief(now, 3, 0.0), _node("127.0.0.2", now - 12, 3, 0.0)], now, 10)
    assert error.host == "127.0.0.2" and "127.0.0.2 sent no report for 12 s" in str(error)


def test_a_chief_that_does_not_come_to_the_step_is_named():
    now = 100.0
    error = find_stall([_chief(now, 7, 0.0), _node("127.0.0.2", now - 0.2, 7, 30.0)], now, 10)
    assert error.host == "127.0.0.1"
    assert "127.0.0.1 (the chief): has not reached training step 8: last completed step 7, not in a session call" in str(error)


def test_a_node_without_a_report_yet_is_named_when_the_chief_waits():
    now = 100.0
    error = find_stall([_chief(now, 0, 12.0), NodeState("127.0.0.2", None)], now, 10)
    assert error.host == "127.0.0.2" and "no report yet" in str(error)


def test_the_coordinator_fails_a_job_whose_node_stops_reporting(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch"))
    from test_coordinator import Cluster, SPEC
    from autodist.runtime.launch.coordinator import Coordinator
    from autodist.runner import new_job_id
    from autodist.spec.resource_spec import ResourceSpec
    said = tmp_path / "said.txt"
    monitor = StepMonitor()
    cluster = Cluster()
    coordinator = Coordinator(ResourceSpec.from_dict(SPEC), new_job_id(), runner_factory=cluster.factory,
                              workdir_base=str(tmp_path), poll_interval=0.05, sink=open(said, "w"),
                              monitor=monitor, stall_timeout=1.0, interrupt_after=None)
    strategy = tmp_path / "strategy.pb"
    strategy.write_bytes(b"plan")
    try:
        coordinator.launch(str(strategy), ["/abs/train.py"], "/the/cwd")
        workers = cluster.handles()
        stop = threading.Event()

        def report():   # 10.0.0.2 keeps reporting; 10.0.0.3 reports once, then goes quiet
            workers[1].send_report({"steps": 2, "busy": 0.0, "step_s": 0.01})
            while not stop.wait(0.2):
                workers[0].send_report({"steps": 2, "busy": 0.1, "step_s": 0.01})
        # before anything the stall timeout counts from: the chief's call, 10.0.0.3's one report
        start = time.monotonic()
        threading.Thread(target=report, daemon=True).start()
        monitor.steps = monitor.synced = 2
        monitor.started(sync=True)   # the chief waits in training step 3
        while coordinator.failure() is None and time.monotonic() - start < 10:
            time.sleep(0.05)
        stop.set()
        error = coordinator.failure()
        assert isinstance(error, StallError) and error.host == "10.0.0.3"
        assert time.monotonic() - start >= 1.0   # not before its stall timeout (the loop above bounds the wait)
        # The failure is published first, then the watch thread stops the others.
        assert wait_until(lambda: all(h.terminated for h in workers), 5.0)
        assert "stalled:" in said.read_text() and "10.0.0.3: has not reached training step 3" in said.read_text()
    finally:
        coordinator.abort()
    assert not os.path.exists(os.path.join(str(tmp_path), "job-" + coordinator.job_id))


class _Handle:
    """What ``job_stall`` reads of a launched node's process: its last report, whether it runs, its log."""

    def __init__(self, report):
        self.report = report

    def poll(self):
        return None

    def tail(self, shown=False):
        return "step 11 loss 0.42"


def test_a_silent_node_that_cannot_be_reached_is_reported_unreachable_not_frozen():
    from autodist.runtime.watch.stall import job_stall
    monitor = StepMonitor()
    monitor.steps = monitor.synced = 11
    monitor.started(sync=True)
    monitor._started -= 12.0   # the chief has waited 12 s in its step 12
    silent = _Handle((time.monotonic() - 12.0, {"steps": 11, "sync": 11, "in_sync": False, "busy": 0.0}))
    asked = []

    def reach(address):
        asked.append(address)
        return "no answer from {}:22 within 3 s (TimeoutError: timed out)".format(address)
    error = job_stall("j", "10.0.0.1", monitor, {"10.0.0.2": silent}, 10.0, sink=io.StringIO(), reach=reach)
    assert asked == ["10.0.0.2"] and error.host == "10.0.0.2"
    assert ("10.0.0.2: has not reached training step 12: last completed step 11, not in a session call, unreachable: "
            "no answer from 10.0.0.2:22 within 3 s (TimeoutError: timed out) (its process may still be running "
            "there), no report for 12.0 s") in str(error)
    assert "stopped or frozen" not in str(error)
    plain = job_stall("j", "10.0.0.1", monitor, {"10.0.0.2": silent}, 10.0, sink=io.StringIO(),
                      reach=lambda address: None)   # it answers: stopped or frozen, as before
    assert "process alive, no report for 12.0 s (stopped or frozen?)" in str(plain)
