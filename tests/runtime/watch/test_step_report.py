"""A node's step monitor and the reports it writes for the chief."""
import os
import select
import time

import pytest

from autodist.runner.frames import FrameSplitter
from autodist.runtime.watch.step_report import WAIT_FOR_CHIEF, ReportWriter, StepMonitor, waiting_for_chief


def test_the_monitor_counts_calls_and_reports_the_one_in_flight():
    monitor = StepMonitor()
    assert monitor.snapshot() == {"steps": 0, "trained": 0, "examples": 0, "busy": 0.0, "step_s": 0.0, "sync": 0,
                                  "in_sync": False}
    began = time.monotonic()
    for _ in range(3):
        monitor.started()
        monitor.finished()
    finished_steps = time.monotonic() - began
    monitor.started()
    time.sleep(0.05)
    snapshot = monitor.snapshot()
    assert snapshot["steps"] == 3
    assert snapshot["busy"] >= 0.05
    # the finished steps' time, not the one in flight: bounded by the loop around them, whatever the machine's load
    assert 0.0 <= snapshot["step_s"] <= finished_steps + 5e-5   # + the report's rounding to 0.1 ms
    monitor.finished()
    assert monitor.snapshot()["busy"] == 0.0 and monitor.snapshot()["steps"] == 4


def test_the_monitor_counts_training_steps_apart_from_other_calls():
    monitor = StepMonitor()
    for sync in (True, False, False, True):   # a step, two reads of a variable, a step
        monitor.started(sync)
        monitor.finished()
    monitor.started(sync=True)
    snapshot = monitor.snapshot()
    assert (snapshot["steps"], snapshot["sync"], snapshot["in_sync"]) == (4, 2, True)
    assert monitor.busy() > 0.0
    monitor.finished()
    monitor.started(sync=False)
    assert monitor.snapshot()["in_sync"] is False and monitor.snapshot()["sync"] == 3
    monitor.finished()
    assert monitor.busy() == 0.0


def test_the_writer_sends_framed_snapshots_on_its_file_descriptor():
    monitor = StepMonitor()
    monitor.started()
    monitor.finished()
    read_end, write_end = os.pipe()
    writer = ReportWriter(monitor, fd=write_end, interval=0.05).start()
    data, deadline = b"", time.monotonic() + 30
    while len(FrameSplitter().split(data.decode())[1]) < 2 and time.monotonic() < deadline:   # 2 reports, bounded
        if select.select([read_end], [], [], 0.1)[0]:
            data += os.read(read_end, 4096)
    writer.stop()
    time.sleep(0.1)
    os.close(write_end)
    while True:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    text, reports = FrameSplitter().split(data.decode())
    assert text == ""
    assert len(reports) >= 2, "2 reports within 30 s, got {}".format(reports)
    assert all(r["steps"] == 1 for r in reports), reports


@pytest.mark.parametrize("report, ended_ago, expected", [
    (None, 10.0, None),
    ({"steps": 4, "busy": 0.0, "step_s": 0.01}, 10.0, None),             # between calls
    ({"steps": 4, "busy": 4.0, "step_s": 0.01}, 1.0, None),              # too soon after the chief's end
    ({"steps": 4, "busy": 4.0, "step_s": 2.0}, 10.0, None),              # its calls are slow anyway
    ({"steps": 4, "busy": 4.0, "step_s": 0.01}, 10.0, (5, 4.0, 0.01)),
], ids=["no-report", "idle", "too-soon", "slow-calls", "waiting"])
def test_waiting_for_chief(report, ended_ago, expected):
    now = time.monotonic()
    assert WAIT_FOR_CHIEF <= 5.0
    got = waiting_for_chief(None if report is None else (now, report), now - ended_ago)
    assert got == expected
