"""Restart a job after a node failure: ``autodist run --max-restarts N`` supervises its attempts.

A chief cannot re-run a script from the middle, and its own TensorFlow server
cannot be stopped inside its process, so with restarts the ``autodist run``
process becomes a supervisor: each attempt is a fresh chief process running
the same command (``python -m autodist run ...``), which launches a new job on
the same resource spec. A chief that ends because another node failed (its
script or server exited, its connection dropped, a stall) exits with
``NODE_FAILED``; the supervisor then waits ``backoff`` s and starts the next
attempt, and a script that saves checkpoints resumes from its newest complete
one (``MonitoredTrainingSession(checkpoint_dir=...)``; the attempt says where
it resumes, the supervisor cannot know). Any other status ends the
supervision with that status: success, the script's own error, Ctrl-C (130),
SIGTERM (143); Ctrl-C during the back-off ends it with 130 too::

    attempt 1   chief ── job ── 127.0.0.2's script killed ── exit NODE_FAILED
                [autodist] restart 1 of 2 in 2 s: attempt 1 (41 s): worker on 127.0.0.2 failed: ...;
                           the script starts again as a new job
    attempt 2   chief ── job ── [autodist] attempt 2: resuming from checkpoint /ckpt/model.ckpt-40 (global step 40)

Exhausted restarts end with status 1 and a line per failed attempt. Ctrl-C
and SIGTERM given to the supervisor go to the attempt running, which stops
its job as always (``docs/running.md``, "How a job ends").

Each attempt finds its number in ``ATTEMPT_ENV`` (``"2"`` for the first
restart): a relaunch may leave out unreachable nodes (``autodist.runtime.recovery.shrink``)
and says which attempt resumes. A script that uses the API
(``AutoDist(..., max_restarts=N)``) is supervised the same way:
``supervise_script`` runs the script again, from its start, as each attempt,
and the process that called it only supervises (``autodist.api``)::

    python train.py            AutoDist(spec, max_restarts=2) ── supervise_script ── exit with the last status
      attempt 1                python train.py  (AUTODIST_ATTEMPT=1) ── AutoDist(...) returns, trains
      attempt 2                python train.py  (AUTODIST_ATTEMPT=2) ── resumes from its checkpoint
"""
import os
import signal
import subprocess
import sys
import threading
import time

from autodist.runtime.notices import notice

__all__ = ["supervise", "supervise_script", "attempt_of", "Attempt", "NODE_FAILED", "EXIT_RESTARTS_EXHAUSTED", "EXIT_INTERRUPTED",
           "ATTEMPT_ENV"]

NODE_FAILED = 75                # an attempt's status when another node of its job failed (EX_TEMPFAIL)
EXIT_RESTARTS_EXHAUSTED = 1     # as a chief whose job failed without restarts
EXIT_INTERRUPTED = 130          # Ctrl-C, as the shell reports a process ended by SIGINT
ATTEMPT_ENV = "AUTODIST_ATTEMPT"   # an attempt's number (1, 2, ...), set by the supervisor
_ERROR = "autodist: error: "


def attempt_of(environ):
    """This process's attempt number under a supervisor (``ATTEMPT_ENV``), or None when not supervised."""
    text = (environ or {}).get(ATTEMPT_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


class Attempt:
    """One chief process; its stderr is passed through, and its last error line kept."""

    def __init__(self, argv, env=None):
        self.error = None
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, env=env)
        self._reader = threading.Thread(target=self._pass_stderr, name="autodist-attempt-stderr", daemon=True)
        self._reader.start()

    def _pass_stderr(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.startswith(_ERROR):
                self.error = line[len(_ERROR):].strip()

    def forward(self, signum, frame):
        """A signal to the supervisor goes to the attempt, which stops its job."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def wait(self):
        code = self.proc.wait()
        self._reader.join(10)
        return code


def _run_attempt(argv, number):
    """Run attempt ``number`` to its end with Ctrl-C / SIGTERM forwarded to it; ``(status, its error line)``."""
    attempt = Attempt(argv, dict(os.environ, **{ATTEMPT_ENV: str(number)}))
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, attempt.forward) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        return attempt.wait(), attempt.error
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def supervise(argv, max_restarts, backoff=2.0, sink=None, option="--max-restarts "):
    """Run ``argv`` (a chief's command) until it ends otherwise than by ``NODE_FAILED``, at most ``max_restarts`` times more.

    Returns the last attempt's status, or ``EXIT_RESTARTS_EXHAUSTED`` when
    every attempt ended by a node failure (each attempt's error is printed).
    ``option`` names the setting in that message (``max_restarts=`` for the API).
    Ctrl-C between two attempts (no job runs then) ends the supervision with
    ``EXIT_INTERRUPTED`` and a line saying so.
    """
    failures = []
    while True:
        started = time.monotonic()
        code, error = _run_attempt(argv, len(failures) + 1)
        if code != NODE_FAILED:
            return code
        failures.append("attempt {} ({:.0f} s): {}".format(len(failures) + 1, time.monotonic() - started,
                                                          (error or "a node failed").splitlines()[0]))
        try:
            if len(failures) > max_restarts:
                notice(sink, "the job failed {} time(s), no restart left ({}{}):\n{}".format(
                    len(failures), option, max_restarts, "\n".join("  " + f for f in failures)))
                return EXIT_RESTARTS_EXHAUSTED
            # The attempt says itself where it resumes ("resuming from checkpoint ..."), or that it
            # starts from the initial values: only the script knows whether it keeps checkpoints.
            notice(sink, "restart {} of {} in {:g} s: {}; the script starts again as a new job".format(
                len(failures), max_restarts, backoff, failures[-1]))
            time.sleep(backoff)
        except KeyboardInterrupt:
            print("autodist: interrupted between two attempts (no job was running); no restart", file=sys.stderr)
            return EXIT_INTERRUPTED


def supervise_script(argv, max_restarts, backoff=2.0):
    """Supervise the running script (``argv``: what follows ``python``) as a chief of its own per attempt.

    For ``AutoDist(..., max_restarts=N)``: the calling process runs no job;
    it returns the status it should exit with. Each attempt runs the same
    command with ``ATTEMPT_ENV`` set, so its ``AutoDist`` trains instead, and
    ends with ``NODE_FAILED`` when another node failed (``Job.node_failure_status``).
    """
    return supervise([sys.executable] + list(argv), max_restarts, backoff, option="max_restarts=")
