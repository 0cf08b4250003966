"""Stall reports: a step that makes no progress for ``stall_timeout`` s is a failure that says who is missing.

Every node's session counts and times its calls (``step_report.StepMonitor``);
launched nodes report ``{"steps", "busy", "step_s"}`` once a second, the chief
reads its own monitor. The coordinator's watch thread asks ``find_stall``
twice a second. A stall is either

    a session call running for ``stall_timeout`` s or more   (a node waits in a
        step's barrier or collective for peers that never come), or
    a node whose reports stopped ``stall_timeout`` s ago     (the process is
        alive but not running: SIGSTOP, swapped out, a frozen machine)

and the report names, for the call that waits, the nodes that have not reached
it and what each is doing::

    stalled: 127.0.0.1 (the chief) has waited 10 s in session call 12 (--stall-timeout 10 s)
      127.0.0.2: has not reached call 12: last completed call 11, process alive, no report for 10.4 s
        (stopped or frozen?); last lines of its log:
        | step 11 loss 0.42
      127.0.0.1 (the chief): waiting in call 12 for 10.0 s

The caller turns it into a ``StallError`` (a ``RemoteWorkerError``), so a stall
ends the job like any other node failure.
"""
import time
from dataclasses import dataclass
from typing import Optional

from autodist.errors import StallError
from autodist.runtime.notices import notice

__all__ = ["NodeState", "find_stall", "job_stall", "DEFAULT_STALL_TIMEOUT", "QUIET_AFTER"]

DEFAULT_STALL_TIMEOUT = 300.0
QUIET_AFTER = 3.0   # s without a report after which a node counts as not running (reports come every second)
_TAIL_LINES = 5


@dataclass(frozen=True)
class NodeState:
    """What the chief knows of one node now: its last report (``(received, dict)`` or None), its process."""

    address: str
    report: Optional[tuple]
    alive: bool = True
    tail: str = ""
    chief: bool = False


def _call(state, now):
    """``(steps, busy_s, quiet_s)``: finished calls, seconds in the current call (0: none), seconds unheard."""
    if state.report is None:
        return 0, 0.0, None
    received, data = state.report
    quiet = max(0.0, now - received)
    busy = float(data.get("busy") or 0.0)
    return int(data.get("steps") or 0), (busy + quiet if busy > 0 else 0.0), quiet


def find_stall(states, now, timeout):
    """A ``StallError`` with the report when the job stalls (see the module docstring), else None.

    ``states``: a ``NodeState`` per node; the chief's report is its own
    monitor's snapshot, received ``now``.
    """
    calls = {s.address: _call(s, now) for s in states}
    waiting = [s for s in states if calls[s.address][1] >= timeout]
    silent = [s for s in states if s.alive and calls[s.address][2] is not None and calls[s.address][2] >= timeout]
    if not waiting and not silent:
        return None
    if waiting:
        waiter = max(waiting, key=lambda s: calls[s.address][1])
        step = calls[waiter.address][0] + 1
        headline = "{} has waited {:.0f} s in session call {}".format(
            _name(waiter), calls[waiter.address][1], step)
    else:
        waiter, step = None, max(calls[s.address][0] for s in states) + 1
        headline = "{} sent no report for {:.0f} s".format(" and ".join(_name(s) for s in silent),
                                                           calls[silent[0].address][2])
    if waiter is None:
        missing = silent
    else:
        missing = [s for s in states if _missing(s, calls[s.address], step)] or [s for s in states if s is not waiter]
    lines = ["stalled: {} (stall timeout {:.0f} s)".format(headline, timeout)]
    lines += [_describe(s, calls[s.address], step, s in missing) for s in missing + [s for s in states
                                                                                      if s not in missing]]
    culprit = missing[0] if missing else waiter
    return StallError(culprit.address, "\n".join(lines), log_tail=culprit.tail)


def job_stall(job_id, chief, monitor, workers, timeout, sink=None):
    """The stall of a running job, announced, or None: the chief's ``monitor`` and ``{address: handle}`` of the scripts."""
    now = time.monotonic()
    states = [NodeState(chief, (now, monitor.snapshot()), chief=True)]
    states += [NodeState(a, h.report, h.poll() is None, h.tail()) for a, h in sorted(workers.items())]
    error = find_stall(states, now, timeout)
    if error is not None:
        notice(sink, "job {}: {}".format(job_id, error.report))
    return error


def _missing(state, call, step):
    """True when ``state``'s node has not reached call ``step``: not in a call, behind, unheard, or gone."""
    steps, busy, quiet = call
    if not state.alive:
        return True
    if quiet is None:
        return True
    if quiet >= QUIET_AFTER and not state.chief:
        return True
    return busy == 0 or steps + 1 < step


def _name(state):
    return "{} (the chief)".format(state.address) if state.chief else state.address


def _describe(state, call, step, missing):
    steps, busy, quiet = call
    if not missing:
        if not busy:
            return "  {}: last completed call {}, not in a session call".format(_name(state), steps)
        return "  {}: waiting in call {} for {:.1f} s".format(_name(state), steps + 1, busy)
    if quiet is None:
        doing = "no report yet (its session may not be open)"
    else:
        doing = "last completed call {}, {}".format(steps, "in call {} for {:.1f} s".format(steps + 1, busy)
                                                    if busy else "not in a session call")
    process = "process alive" if state.alive else "process gone"
    if state.alive and quiet is not None and quiet >= QUIET_AFTER and not state.chief:
        process += ", no report for {:.1f} s (stopped or frozen?)".format(quiet)
    text = "  {}: has not reached call {}: {}, {}".format(_name(state), step, doing, process)
    tail = [line for line in state.tail.splitlines() if line.strip()][-_TAIL_LINES:]
    if tail:
        text += "; last lines of its log:\n" + "\n".join("    | " + line for line in tail)
    return text
