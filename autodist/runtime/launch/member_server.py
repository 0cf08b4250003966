"""A launched node's TensorFlow server, in its script's own process: one process per node.

A node that runs the user's script needs no second process for its server:
the script's process hosts it, and its session reaches the master in the
same process (TensorFlow's ``LocalMaster``) instead of over gRPC, one hop
less on every step. The chief launches the script with ``serves`` set in its
``JobContext`` and waits for the script's ready line, as it waited for a
server process's::

    chief (Coordinator)                     node 127.0.0.2: python train.py (AUTODIST_JOB, serves)
      start the script           ------>    AutoDist(...) -> serve(): the server listens,
      wait for the ready line    <------    "AUTODIST_SERVER_READY <port>" on stdout
      ...the job trains...                  ...the script trains...
                                            the script ends normally: its step report says
      the script is done         <------    {"done": true}; the process keeps serving
      stop the job's processes   ------>    (the chief may still read variables it holds)
                                            until the chief stops it or goes away

A script that ends with an uncaught error leaves at once, and the chief sees
the failure as before. Only ``sys.exit(code)`` outside ``ad.scope()`` is
indistinguishable from a normal end at that point (Python does not tell exit
handlers the status): such a node reports done and its status is not seen.
"""
import atexit
import os
import sys
import time

from autodist.runtime.launch.server import READY, start_in_process
from autodist.runner.frames import encode_report

__all__ = ["serve", "note_exit", "script_failed", "RELEASE_POLL"]

RELEASE_POLL = 0.2   # s between two looks at whether the chief is still there
_SERVING = {}        # target -> the monitor whose node this process serves
_EXITS = []          # statuses of sys.exit inside ad.scope(), as note_exit saw them


def serve(context, cpus, threads, monitor, fd=1, cores=()):
    """Start this process's server for ``context``'s node and announce it on ``fd``; idempotent.

    ``cpus``, ``threads``, ``cores``: the node's spec (``server.start_in_process``).

    ``monitor`` (a ``step_report.StepMonitor``) is marked done when the
    script ends normally; its reports carry that to the chief.
    """
    if context.target in _SERVING:
        return
    start_in_process(context.cluster_spec(), context.task_index, cpus, context.chief_task, threads, cores)
    _SERVING[context.target] = monitor
    port = context.servers[context.address].rsplit(":", 1)[1]
    os.write(fd, "{} {}\n".format(READY, port).encode("ascii"))
    atexit.register(_serve_until_released, monitor, os.getppid(), fd)


def note_exit(code):
    """The script leaves ``ad.scope()`` through ``sys.exit(code)``: a failing status is not a normal end."""
    _EXITS.append(code)


def script_failed():
    """At exit: whether the script ends by an uncaught exception or a failing ``sys.exit`` (``note_exit``)."""
    return getattr(sys, "last_value", None) is not None or any(code not in (None, 0) for code in _EXITS)


def _serve_until_released(monitor, parent, fd):
    """At the script's normal end: report done, then keep serving until the chief stops us or is gone."""
    if script_failed():
        return   # the script failed: leave with its status, the chief stops the job
    monitor.done = True
    try:
        os.write(fd, encode_report(monitor.snapshot()))
    except OSError:   # nobody reads our output any more: the chief is gone
        return
    while os.getppid() == parent:
        time.sleep(RELEASE_POLL)
