"""Stall reports: a step that makes no progress for ``stall_timeout`` s is a failure that says who is missing.

Every node's session counts and times its calls (``step_report.StepMonitor``);
launched nodes report ``{"steps", "sync", "in_sync", "busy", "step_s"}`` once
a second, the chief reads its own monitor. Steps are numbered by the calls
that wait for the other nodes (``autodist.runtime.session.sync_ops``): the chief's
own extra calls (reading a variable, a chief-only hook) do not count, so
they never make another node look behind. The coordinator's watch thread
asks ``find_stall`` twice a second. A stall is either

    a session call running for ``stall_timeout`` s or more   (a node waits in a
        step's barrier or collective for peers that never come), or
    a node whose reports stopped ``stall_timeout`` s ago     (the process is
        alive but not running: SIGSTOP, swapped out, a frozen machine)

and the report names, for the call that waits, the nodes that have not reached
it and what each is doing::

    stalled: 127.0.0.1 (the chief) has waited 10 s in training step 12 (stall timeout 10 s)
      127.0.0.2: has not reached training step 12: last completed step 11, not in a session call,
        process alive, no report for 10.4 s (stopped or frozen?); last lines of its log:
        | step 11 loss 0.42
      127.0.0.1 (the chief): waiting in training step 12 for 10.0 s

The caller turns it into a ``StallError`` (a ``RemoteWorkerError``), so a stall
ends the job like any other node failure.

The chief cannot report anything while it is itself stopped or frozen, so a
launched node also bounds its own calls (``member_stall``): one that runs
``MEMBER_GRACE`` s past the stall timeout means the chief did not end the job
when it should have, and the node gives up with a ``StallError`` naming the
chief instead of waiting for it forever.
"""
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Optional

from autodist.errors import StallError
from autodist.runtime.notices import notice

__all__ = ["NodeState", "find_stall", "job_stall", "member_stall", "DEFAULT_STALL_TIMEOUT", "QUIET_AFTER",
           "MEMBER_GRACE"]

DEFAULT_STALL_TIMEOUT = 300.0
QUIET_AFTER = 3.0   # s without a report after which a node counts as not running (reports come every second)
MEMBER_GRACE = 10.0   # s a launched node waits past the stall timeout for the chief to end a stalled job
_TAIL_LINES = 5


@dataclass(frozen=True)
class NodeState:
    """What the chief knows of one node now: its last report (``(received, dict)`` or None), its process."""

    address: str
    report: Optional[tuple]
    alive: bool = True
    tail: str = ""
    chief: bool = False
    unreachable: str = ""   # why the node cannot be reached now (a cut link), "" when it answers or is not asked


def _call(state, now):
    """``(done, busy_s, quiet_s, in_step)``: training steps finished, seconds in the current call (0: none),
    seconds unheard (None: never heard), whether the current call is a training step.

    Steps are the calls that synchronize (``sync`` of the report); a report
    without it counts every call, each one a step.
    """
    if state.report is None:
        return 0, 0.0, None, False
    received, data = state.report
    quiet = max(0.0, now - received)
    busy = float(data.get("busy") or 0.0)
    done = int(data.get("sync", data.get("steps")) or 0)
    return done, (busy + quiet if busy > 0 else 0.0), quiet, busy > 0 and bool(data.get("in_sync", True))


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
    step = max(calls[s.address][0] for s in states) + 1
    if waiting:
        heard = [s for s in waiting if not _unheard(s, calls[s.address])] or waiting   # a stopped node's call
        waiter = max(heard, key=lambda s: calls[s.address][1])                      # only seems to run on
        done, busy, _, in_step = calls[waiter.address]
        step = done + 1
        headline = "{} has waited {:.0f} s in {}".format(_name(waiter), busy, _where(done, in_step))
        missing = [s for s in states if (_missing(s, calls[s.address], step) if in_step
                                         else _unheard(s, calls[s.address]))]
        missing = missing or [s for s in states if s is not waiter]
    else:
        headline = "{} sent no report for {:.0f} s".format(" and ".join(_name(s) for s in silent),
                                                           calls[silent[0].address][2])
        missing = silent
    lines = ["stalled: {} (stall timeout {:.0f} s)".format(headline, timeout)]
    lines += [_describe(s, calls[s.address], step, s in missing) for s in missing + [s for s in states
                                                                                      if s not in missing]]
    return StallError(missing[0].address, "\n".join(lines), log_tail=missing[0].tail)


def job_stall(job_id, chief, monitor, workers, timeout, sink=None, reach=None):
    """The stall of a running job, announced, or None: the chief's ``monitor`` and ``{address: handle}`` of the scripts.

    ``reach(address)`` (a runner's ``unreachable``) is asked, once a stall is
    found, about each node that has gone silent: a node that cannot be reached
    is reported so (a cut link), not as stopped or frozen.
    """
    now = time.monotonic()
    states = [NodeState(chief, (now, monitor.snapshot()), chief=True)]
    states += [NodeState(a, h.report, h.poll() is None, h.tail(shown=True)) for a, h in sorted(workers.items())]
    error = find_stall(states, now, timeout)
    silent = [s for s in states if not s.chief and s.alive and (s.report is None or now - s.report[0] >= QUIET_AFTER)]
    if error is not None and reach is not None and silent:
        with ThreadPoolExecutor(len(silent)) as pool:   # each answer is bounded by the runner's own timeout
            problems = dict(zip((s.address for s in silent), pool.map(lambda s: reach(s.address), silent)))
        states = [replace(s, unreachable=problems.get(s.address) or "") for s in states]
        error = find_stall(states, now, timeout)
    if error is not None:
        notice(sink, "job {}: {}".format(job_id, error.report))
    return error


def member_stall(monitor, address, chief, timeout, grace=MEMBER_GRACE):
    """A ``StallError`` naming the ``chief`` when this node's call has run ``timeout + grace`` s, else None.

    For a node launched by a chief (``address``: this node), checked twice a
    second while it waits in a session call (``session.distributed.WatchedCaller``).
    """
    busy = monitor.busy()
    if timeout is None or busy < timeout + grace:
        return None
    snapshot = monitor.snapshot()
    return StallError(chief, "stalled: {} has waited {:.0f} s in {} (stall timeout {:.0f} s), and the chief has "
                             "not ended the job: it is stopped, frozen or cannot reach {}; {} gives up".format(
                                 address, busy, _where(snapshot["sync"], snapshot["in_sync"]), timeout, address,
                                 address))


def _where(done, in_step):
    """The call a node is in, after ``done`` training steps: the next step, or a call outside them."""
    if in_step:
        return "training step {}".format(done + 1)
    return "a session call outside the training steps (after training step {})".format(done)


def _unheard(state, call):
    """True when ``state``'s node is gone, has never reported, or has not reported for ``QUIET_AFTER`` s."""
    quiet = call[2]
    return not state.alive or quiet is None or (quiet >= QUIET_AFTER and not state.chief)


def _missing(state, call, step):
    """True when ``state``'s node has not reached training step ``step``: unheard, gone, behind, elsewhere."""
    done, busy, _, in_step = call
    if _unheard(state, call):
        return True
    return done < step and not (in_step and done + 1 == step)


def _name(state):
    return "{} (the chief)".format(state.address) if state.chief else state.address


def _doing(call):
    done, busy, _, in_step = call
    if not busy:
        return "last completed step {}, not in a session call".format(done)
    if in_step:
        return "waiting in training step {} for {:.1f} s".format(done + 1, busy)
    return "last completed step {}, in a session call outside the training steps for {:.1f} s".format(done, busy)


def _describe(state, call, step, missing):
    if not missing:
        return "  {}: {}".format(_name(state), _doing(call))
    quiet = call[2]
    doing = "no report yet (its session may not be open)" if quiet is None else _doing(call)
    process = "process alive" if state.alive else "process gone"
    if state.unreachable:
        process = "unreachable: {} (its process may still be running there)".format(state.unreachable)
    if state.alive and quiet is not None and quiet >= QUIET_AFTER and not state.chief:
        process += ", no report for {:.1f} s{}".format(quiet, "" if state.unreachable else " (stopped or frozen?)")
    text = "  {}: has not reached training step {}: {}, {}".format(_name(state), step, doing, process)
    tail = [line for line in state.tail.splitlines() if line.strip()][-_TAIL_LINES:]
    if tail:
        text += "; last lines of its log:\n" + "\n".join("    | " + line for line in tail)
    return text
