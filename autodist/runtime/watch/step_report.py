"""What a node's session is doing, for the chief: step counts and the step in flight.

    monitor = StepMonitor()              the distributed session calls started() / finished()
    ReportWriter(monitor).start()        on a node launched by a chief: a report a second

A node launched by the chief reports on its stdout, framed
(``autodist.runner.frames``), once a second::

    {"steps": 42, "trained": 41, "examples": 1344, "busy": 0.0, "step_s": 0.012, "sync": 40, "in_sync": false}

``steps`` session calls finished, ``trained`` those of them that ran a
training op (the training steps the progress line counts: a final read of
the weights is a call, not a step), ``sync`` those that waited for the other
nodes (``autodist.runtime.session.sync_ops``; the stall report numbers steps by it),
``in_sync`` whether the call in flight is one, ``examples`` the rows those calls fed
(each call's batch: the size of its feeds along the dimension the session
splits them on; 0 for calls that feed nothing, e.g. an input pipeline),
``busy`` seconds the current call has been running (0 when none is),
``step_s`` the median of the last calls' durations; ``"done": true`` once
the script has ended normally and its process only serves
(``autodist.runtime.launch.member_server``); ``"leaving": "SIGTERM"`` once the node
got a preemption notice in an elastic job (``autodist.runtime.elastic``). The chief's progress
line (``autodist.runtime.watch.progress``) adds them up over the nodes.
The chief reads them off the node's output stream: a node that sits in one
call for many times its usual step while the chief's script has ended is
waiting for the chief (``waiting_for_chief``), and the coordinator stops the
job instead of waiting for it (``autodist.runtime.launch.coordinator``).
"""
import collections
import os
import statistics
import time

from autodist.runner.frames import encode_report
from autodist.runtime.watch.ticker import Ticker

__all__ = ["StepMonitor", "ReportWriter", "script_done", "waiting_for_chief", "REPORT_INTERVAL", "WAIT_FOR_CHIEF"]

REPORT_INTERVAL = 1.0
WAIT_FOR_CHIEF = 3.0    # s a node may sit in one session call after the chief's script ended


class StepMonitor:
    """Counts a session's calls and times them; two clock reads a call."""

    def __init__(self, window=20):
        self.steps = 0
        self.synced = 0   # finished calls that synchronized with the other nodes (training steps)
        self.trained = 0
        self.examples = 0
        self.done = False   # the script has ended normally (``runtime.launch.member_server``)
        self.leaving = None   # the preemption signal's name, once this node got one (``runtime.elastic``)
        self._started = None
        self._sync = False
        self._durations = collections.deque(maxlen=window)
        self.meter = None   # a ``straggler.LinkMeter``: its counters go into the reports ("net")

    def started(self, sync=False):
        """A call begins; ``sync``: it waits for the other nodes (a training step)."""
        self._sync = sync
        self._started = time.monotonic()

    def finished(self, examples=0, trained=True):
        """A call ended; ``trained``: it ran a training op (it was a training step)."""
        started, self._started = self._started, None
        if started is not None:
            self._durations.append(time.monotonic() - started)
        self.steps += 1
        self.synced += 1 if self._sync else 0
        self.trained += bool(trained)
        self.examples += examples

    def busy(self):
        """Seconds the call in flight has been running (0.0: none is)."""
        started = self._started
        return time.monotonic() - started if started is not None else 0.0

    def snapshot(self):
        started = self._started
        report = {"steps": self.steps, "trained": self.trained, "examples": self.examples,
                  "busy": round(time.monotonic() - started, 3) if started is not None else 0.0,
                  "step_s": round(statistics.median(self._durations), 4) if self._durations else 0.0,
                  "sync": self.synced, "in_sync": started is not None and self._sync}
        if self.done:
            report["done"] = True
        if self.leaving:
            report["leaving"] = self.leaving
        net = self.meter.counters() if self.meter is not None else None
        if net is not None:
            report["net"] = net
        return report


class ReportWriter:
    """A daemon thread writing ``monitor``'s snapshot to file descriptor ``fd`` every ``interval`` s."""

    def __init__(self, monitor, fd=1, interval=REPORT_INTERVAL):
        self._monitor = monitor
        self._fd = fd
        self._ticker = Ticker("autodist-step-report", interval, self._write)

    def start(self):
        self._ticker.start()
        return self

    def stop(self):
        self._ticker.stop()

    def _write(self):
        try:
            os.write(self._fd, encode_report(self._monitor.snapshot()))
        except OSError:   # the chief stopped reading: nobody to report to
            return False


def script_done(report):
    """Whether a node's report (``(received, dict)`` or None) says its script has ended normally."""
    return report is not None and bool(report[1].get("done"))


def waiting_for_chief(report, ended):
    """``(steps, seconds, step_s)`` when a node's report (``(received, dict)``) shows it waiting for the chief.

    That is: a report received ``WAIT_FOR_CHIEF`` s or more after the chief's
    script ``ended`` (monotonic) says the node has been in one session call
    that long, and for four times its median call or more.
    """
    if report is None:
        return None
    received, data = report
    busy, step_s = float(data.get("busy") or 0.0), float(data.get("step_s") or 0.0)
    if received - ended < WAIT_FOR_CHIEF or busy < max(WAIT_FOR_CHIEF, 4 * step_s):
        return None
    return int(data.get("steps") or 0) + 1, busy, step_s
