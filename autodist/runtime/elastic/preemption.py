"""A preemption notice to a node that is not the chief: the job saves a checkpoint, then the node leaves.

Spot and preemptible machines get a signal some time before they go
(SIGTERM by default; ``--preemption-signal``). In an elastic job the chief
launches every other node with ``PREEMPTION_ENV`` set, and the node's script
process (which also hosts the node's TensorFlow server) answers the first
such signal by telling the chief, instead of dying::

    node 127.0.0.2                                  chief
    SIGTERM -> report {"leaving": "SIGTERM"}  --->  sees it within ~0.2 s; after its current step it
               [autodist] preemption notice ...     saves a checkpoint, stops the job (its directory
               keeps training and serving           first, then the processes), exits RESIZED; the
                                                    supervisor relaunches without 127.0.0.2
    the stop's SIGTERM: the job directory is gone -> dies at once (the default action)

The node keeps taking part in the steps until then, so the checkpoint is of
a step every node finished; it waits at most ``grace`` s (then it dies by the
signal, and the job fails and restarts as after any lost node). A second
notice, or any notice once the chief has removed the job's directory (the
chief stopping its job), ends the process at once, as without a handler.
"""
import os
import signal
import threading

from autodist.runner.frames import encode_report
from autodist.runtime.elastic.protocol import PREEMPTION_ENV
from autodist.runtime.notices import notice

__all__ = ["install_member_handler", "preemption_setting", "signal_number"]


def signal_number(name):
    """``"SIGTERM"`` / ``"TERM"`` / ``"15"`` as a signal number; ValueError for anything else."""
    text = str(name).strip().upper()
    if text.isdigit():
        number = int(text)
        text = signal.Signals(number).name if number in signal.valid_signals() else ""
    text = text if text.startswith("SIG") or not text else "SIG" + text
    if not isinstance(getattr(signal, text, None), signal.Signals) or text in ("SIGKILL", "SIGSTOP"):
        raise ValueError("{!r} is not a signal a process can handle (e.g. SIGTERM, SIGUSR1)".format(name))
    return getattr(signal, text).value


def preemption_setting(signum, grace):
    """The value of ``PREEMPTION_ENV`` for a member."""
    return "{} {:g}".format(signal.Signals(signum).name, grace)


class _Notice:
    def __init__(self, signum, grace, monitor, workdir, address):
        self.signum, self.grace = signum, grace
        self._monitor, self._workdir, self._address = monitor, workdir, address

    def __call__(self, signum, frame):
        if self._monitor.leaving or not os.path.isdir(self._workdir):
            _die(signum)   # a second notice, or the chief is stopping the job: leave now
        self._monitor.leaving = signal.Signals(signum).name
        try:
            os.write(1, encode_report(self._monitor.snapshot()))   # at once, not at the next report
        except OSError:
            _die(signum)
        notice(None, "preemption notice ({}) on {}: the job saves a checkpoint at its next step, then this node "
                     "leaves (it waits at most {:g} s)".format(self._monitor.leaving, self._address, self.grace))
        timer = threading.Timer(self.grace, signal.pthread_kill, (threading.main_thread().ident, signum))
        timer.daemon = True
        timer.start()


def _die(signum):
    """End the process by ``signum``'s default action (the status a shell reports for it)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_member_handler(environ, monitor, context):
    """On a member launched by an elastic job's chief: answer the preemption signal (module docstring).

    Returns the handler, or None (not elastic, the chief, or not the main thread).
    """
    text = (environ or {}).get(PREEMPTION_ENV)
    if not text or context is None or context.is_chief or threading.current_thread() is not threading.main_thread():
        return None
    name, grace = text.split()
    handler = _Notice(signal_number(name), float(grace), monitor, os.path.expanduser(context.workdir),
                      context.address)
    signal.signal(handler.signum, handler)
    return handler
