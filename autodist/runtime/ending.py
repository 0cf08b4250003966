"""How this process's part in a job ends: the chief's teardown, a script's sys.exit, the status at exit.

``Job`` (``runtime.job``) takes these from ``JobEnding``; they are apart
because they are one concern, the end, told in ``docs/running.md``, "How a job
ends":

    ad.finish_job(...)             finish: wait for (or abort) the other nodes, stop every process
    job.succeeded()                the job ended well: after_success (autodist run's checkpoints go)
    sys.exit(code) in ad.scope()   chief_exiting: an error status ends the job at once
    the chief's exit               _finish_at_exit: the teardown; a failed node's status
    a joined process's exit        _platform_exit: "done", EXIT_RETRY after a peer's failure, or its failed status
    the chief's last exit work     leave_if_stuck: a step still waiting on a failed node ends with its status
    any process's exit             close_at_exit: the session closed before TensorFlow unloads
"""
import logging
import os
import sys

from autodist.errors import RemoteWorkerError
from autodist.runtime.join.places import EXIT_RETRY
from autodist.runtime.launch.member_server import note_exit, script_failed
from autodist.runtime.session.distributed import calls_in_flight

__all__ = ["JobEnding", "close_at_exit", "leave_if_stuck", "leave_with"]


class JobEnding:
    """The end of a ``Job`` (module docstring); uses the job's coordinator, platform and progress line.

    It sets the job's ``_node_failed`` when the job ended through another node's failure
    (``leave_if_stuck`` reads it).
    """

    def _platform_exit(self):
        """The end of a platform-started job's process: stopped by a peer's failure (retry status), done, or its
        script failed (it leaves with its own status at once: the others see it gone, and stop with the retry
        status; saying "done" and waiting for the chief would hold a chief that waits for this process)."""
        self._stop_watches()
        failure = self._platform.failure()
        if failure is None:
            if not script_failed() and self._platform.finish():
                self._after_success()
            return
        leave_with(EXIT_RETRY)   # another process failed or went away: the platform restarts the whole job

    def succeeded(self):
        """The chief's script ended with status 0 and ``finish`` found no failure: ``after_success`` runs now; in a
        platform-started job at the process's exit, once every process of the job has said it is done."""
        if self._platform is None:
            self._after_success()

    def _after_success(self):
        callbacks, self.after_success = list(self.after_success), []
        for callback in callbacks:
            callback()

    # -- finish ------------------------------------------------------------------------
    def finish(self, abort=False, timeout=120.0, reason=None):
        """End the job this chief launched (``AutoDist.finish_job``): wait up to ``timeout`` s for the
        other nodes' scripts (``abort``: stop them now, announcing ``reason``), stop every process of
        the job, remove its directories, and raise the first ``RemoteWorkerError``. On other nodes and
        when done already it only stops this node's watches (``_stop_watches``)."""
        self._stop_watches()
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is None:
            return
        try:
            if not abort:
                self._close_session()
                coordinator.finish(timeout)
                return
            coordinator.abort(reason=reason)
            failure = coordinator.failure()
            if failure is not None:
                raise failure
        except RemoteWorkerError:
            self._node_failed = True
            raise

    def chief_exiting(self, code):
        """The script leaves ``scope()`` through ``sys.exit(code)``: an error status ends the job at once.

        The other nodes would otherwise wait in their next step for a chief
        that will never take it. The status stays the script's own. A launched
        member notes it: with a failing status its process does not stay to
        serve (``runtime.launch.member_server``).
        """
        if self._launched_by_chief:
            note_exit(code)
        if self._coordinator is None or code is None or code == 0:
            return
        try:
            self.finish(abort=True, reason="the chief's script is exiting with {}".format(
                "code {}".format(code) if isinstance(code, int) else "an error ({})".format(code)))
        except RemoteWorkerError as e:   # an earlier failure of another node: say it, keep the script's status
            print("autodist: error: {}".format(e), file=sys.stderr, flush=True)

    def _finish_at_exit(self):
        """At the chief's exit: end the job; abort it after an error in the script.

        Python has fixed the exit status by now, and an atexit handler cannot
        change it (a ``SystemExit`` raised here is ignored). When another
        node's script failed, the job failed, and the shell that started the
        chief must see it: after the complete teardown, the process ends with
        ``node_failure_status`` itself (``EXIT_NODE_FAILED``; ``NODE_FAILED`` in a
        supervised attempt, also when the failure reached the script as an
        uncaught ``RemoteWorkerError``, so that the supervisor restarts the
        job). That is the only way Python leaves.
        """
        self._stop_watches()
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is None:
            return
        error = getattr(sys, "last_value", None)
        if error is not None:   # the traceback is printed and the status is non-zero already
            coordinator.abort(reason="the chief's script was interrupted" if isinstance(error, KeyboardInterrupt)
                              else "the chief's script failed ({})".format(type(error).__name__))
            failure = coordinator.failure()
            self._node_failed = failure is not None
            if isinstance(error, RemoteWorkerError) and failure is not None and self.attempt:
                print("autodist: error: {}".format(failure), file=sys.stderr, flush=True)
                leave_with(self.node_failure_status)   # another node failed: the supervisor restarts
            return
        try:
            self._close_session()
            coordinator.finish()
        except RemoteWorkerError as e:
            self._node_failed = True
            print("autodist: error: {}".format(e), file=sys.stderr, flush=True)
            leave_with(self.node_failure_status)

    def _close_session(self):
        """Close this chief's session while the other nodes still serve: closing it deletes its sessions on their
        servers, and once they are gone each deletion printed a gRPC UNAVAILABLE warning on the user's console."""
        close = getattr(self.session, "close", None)
        if close is not None:
            close()


def leave_if_stuck(job_ref):
    """After another node failed, leave with the node-failure status while a step still waits for it.

    A step waiting for a node behind a cut link (silence, no reset) may return during Python's
    finalization, whose end of a daemon thread then aborts the process (134) instead.
    """
    job = job_ref()
    if job is not None and job._node_failed and calls_in_flight():
        leave_with(job.node_failure_status)


def close_at_exit(job_ref):
    """Close the job's session at exit if the script did not: a session left open reports errors from
    TensorFlow's callables once TensorFlow is unloaded."""
    job = job_ref()
    close = getattr(job.session, "close", None) if job is not None else None
    if close is not None:
        close()


def leave_with(status):
    """End the process with ``status`` from an atexit handler, after flushing what it wrote."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    logging.shutdown()
    os._exit(status)  # see Job._finish_at_exit: at exit there is no other way to set the status

