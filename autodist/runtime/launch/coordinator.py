"""Coordinator: the chief's side of a multi-node job.

    launch   check every remote host (preflight: reachable, host key trusted, authenticated,
             matching python/autodist/TensorFlow), all at once, before anything starts;
             pick a free server port on every node (held from other jobs until its server
             listens: ``runner.allocation.PortHold``); make the job's working directory
             there (mode 0700) and copy the strategy into it; start the chief's TensorFlow
             server in this process, then the user's script on every other node with its
             JobContext in the environment; each script's process hosts its node's server
             (``autodist.runtime.launch.member_server``: one process per node) and the
             launch waits until each listens. Ctrl-C or SIGTERM meanwhile stops the
             launch at its next step and removes whatever it started
    watch    a thread polls every process twice a second; a script that fails or
             a dropped connection stops the whole job at once and is reported
             as ``RemoteWorkerError`` (host, exit code, last
             log lines) by ``failure()``. The distributed session raises it from
             ``run``; if nothing has asked for it ``interrupt_after`` seconds
             later (the chief is busy elsewhere: evaluating, sleeping, stuck),
             the main thread gets it raised through a SIGINT, wherever it is.
             Ctrl-C and SIGTERM to the chief stop the job first (SIGTERM then
             exits with 143); a second signal while it stops is acknowledged,
             never allowed to cut the stop short (``autodist.runtime.launch.chief_signals``)
    finish   wait for the other scripts to end (or report done while their
             process still serves), stop their processes, remove the
             working directories (each launched process's full log stays on the
             chief: ``autodist.runtime.launch.job_logs``); ``abort`` does the same without waiting
             (``release_first``, an elastic job: the directories go before the processes are
             signalled, which tells a member that the signal is the stop, not a preemption
             notice: ``autodist.runtime.elastic.preemption``). A
             node whose reports show it waiting for a step the chief will never
             take (``autodist.runtime.watch.step_report.waiting_for_chief``) is
             stopped then, not after the timeout

Processes are started and stopped through a runner (``autodist.runner``):
loopback nodes without an ssh group locally, the others over SSH; with the
``srun`` launcher (``runner_factory``) every node but the chief as a Slurm job step. Only the
processes the job started are ever signalled, by process group. Two jobs on
one host never share a port, a directory or a process: everything is keyed on
the job id. The console shows the nodes' own lines (``autodist.runner.console``;
``verbose``: every line). What one node's start is made of (its runner, job
directory, ready handshake) is in ``autodist.runtime.launch.node``;
this module sequences them and watches the result.
"""
import dataclasses
import os
import posixpath
import threading
import time

from autodist.spec.cluster import cpu_count_of
from autodist.errors import LaunchError
from autodist.runtime.launch.chief_signals import ChiefSignals
from autodist.runtime.context import JobContext
from autodist.runtime.launch.job_logs import LOG_BASE, JobLogs
from autodist.runner.allocation import release_ports
from autodist.runner.console import NodeConsole, WholeLines
from autodist.runtime.notices import ANNOUNCE
from autodist.runtime.watch.stall import job_stall
from autodist.runner.base import write_line
from autodist.runtime.launch.node import (STRATEGY_FILE, await_ready, default_runner, describe_exit, host_port,
                                          python_for, runner_factory, stage_job_dir)
from autodist.runtime.launch.server import READY, start_in_process
from autodist.runtime.watch.step_report import script_done, waiting_for_chief

__all__ = ["Coordinator", "default_runner", "runner_factory", "describe_exit", "WORKDIR_BASE", "STRATEGY_FILE"]

WORKDIR_BASE = "~/.autodist/jobs"
FINISH_POLL = 0.1


class Coordinator:
    """Start, watch and stop the processes of one job (see the module docstring)."""

    def __init__(self, resource_spec, job_id, runner_factory=default_runner, sink=None, poll_interval=0.5,
                 ready_timeout=120.0, preflight_timeout=60.0, python=None, workdir_base=WORKDIR_BASE,
                 interrupt_after=2.0, verbose=False, log_base=LOG_BASE, monitor=None, stall_timeout=None,
                 worker_env=None, before_term=None, release_first=False):
        self.spec = resource_spec
        self.job_id = job_id
        self._runner_factory = runner_factory
        self._sink = sink if sink is not None else NodeConsole(verbose=verbose, hidden=(READY,))
        self._relays_to_stdout = sink is None   # the chief's own lines and the nodes' share sys.stdout
        self._whole_lines = None                # the WholeLines this job installed as sys.stdout
        self.logs = JobLogs(job_id, log_base)
        self._poll = poll_interval
        self._ready_timeout = ready_timeout
        self._preflight_timeout = preflight_timeout
        self._python = python
        self._base = workdir_base
        self._runners = {}
        self._port_holds = {}   # address -> runner.allocation.PortHold of its port, until its server listens
        self._workers = {}      # address -> handle of its script
        self._workdir = None    # the same path on every node
        self._created = set()   # addresses whose working directory exists
        self._failure = None
        self._delivered = False     # someone has seen the failure
        self._finishing = False     # finish() or abort() is running: never interrupt it
        self._cleanup = "none"      # "running" while abort() stops the job, "done" after
        self._interrupt_after = interrupt_after
        self._monitor = monitor               # the chief's StepMonitor, for stall reports
        self._stall_timeout = stall_timeout   # None: no stall reports
        self._worker_env = dict(worker_env or {})   # more environment for the scripts
        # an elastic job's members take a signal while their job directory exists as a preemption notice
        # (``runtime.elastic.preemption``): the directories go first when the chief stops the job
        self._release_first = release_first
        self._signals = ChiefSignals(stop=self.abort, phase=lambda: self._cleanup, on_repeat=self._still_stopping,
                                     interrupts=interrupt_after is not None, before_term=before_term)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.context = None
        if resource_spec.remote_nodes:
            # paramiko closes every connection in an atexit handler registered when it is
            # first imported. Importing it now, before the caller registers its own exit
            # handler (AutoDist's ``finish``), makes that handler run first, while the
            # connections to the other nodes are still up.
            import autodist.runner.ssh  # noqa: F401

    @property
    def workdir(self):
        """The job's working directory (a path on each node, maybe starting with ``~``)."""
        return self._workdir

    def handles(self):
        """``{(address, "worker"): ProcessHandle}`` of every process started so far (each node's script,
        which hosts the node's server)."""
        return {(a, "worker"): h for a, h in self._workers.items()}

    # -- launch ----------------------------------------------------------------------
    def _python_for(self, runner):
        return python_for(runner, self._python)

    def launch(self, strategy_path, argv, cwd, serve_chief=False, staged=()):
        """Start the other nodes; returns the chief's JobContext. ``argv`` is what runs after ``python``.

        ``argv`` is an autodist script (or the probe's protocol client), whose
        process hosts its node's server (``autodist.runtime.launch.member_server``)
        and announces it (``server.READY``). ``staged``: more local files
        copied into the job directory of every node, next to the strategy,
        under their own names (the chief's calibration for AutoStrategy).

        ``serve_chief``: this process is the chief, and its own TensorFlow
        server starts (``server.start_in_process``) as soon as the ports are
        chosen, before any other process starts: the chief binds its own port
        before anyone else can take it.

        Raises ``PreflightError`` (nothing started) when a host is unfit, or
        ``LaunchError`` / ``RemoteWorkerError`` when a process cannot start; in
        every case whatever had started is stopped again.
        """
        from autodist.runner import job_workdir
        self._signals.hold()   # Ctrl-C / SIGTERM now: acted on at the next step, when all started is known
        try:
            self._runners = {n.address: self._runner_factory(n, self.spec, self._sink) for n in self.spec.node_specs}
            if self._relays_to_stdout:
                self._whole_lines = WholeLines.install()
            self._signals.check()
            self._preflight()
            self._signals.check()
            servers = self._pick_ports()
            self._workdir = job_workdir(self._base, self.job_id)
            self._stage(strategy_path, staged)
            logs = self.logs.start()
            self._signals.check()
            chief = self.spec.chief
            self.context = JobContext(job_id=self.job_id, address=chief, servers=servers, chief=chief,
                                      strategy_path=os.path.expanduser(posixpath.join(self._workdir, STRATEGY_FILE)),
                                      workdir=self._workdir)
            write_line(ANNOUNCE, self._sink, "job {}: {} nodes, TensorFlow servers {}, working directory {}, "
                       "{}".format(self.job_id, len(servers), " ".join(
                           servers[a] for a in self.context.addresses), self._workdir, logs))
            if serve_chief:
                self._serve_chief()
            self._start_workers(argv, cwd)
            await_ready(self._workers, self._ready_timeout, self._signals.check)
            release_ports(self._port_holds.values())
            self._signals.release()
        except BaseException:
            self.abort()
            raise
        self._thread = threading.Thread(target=self._watch, name="autodist-coordinator", daemon=True)
        self._thread.start()
        return self.context

    def _preflight(self):
        """Check every remote host, in parallel; raises PreflightError naming each failure."""
        from autodist.runner import LocalRunner
        from autodist.runner.preflight import local_versions, preflight
        remote = [r for r in self._runners.values() if not isinstance(r, LocalRunner)]
        if remote:
            preflight(remote, local_versions(), timeout=self._preflight_timeout, python=self._python or "python3")

    def _pick_ports(self):
        """``{address: "host:port"}``: a port free on each node, distinct among nodes sharing a machine, held from
        other jobs until every server listens (``runner.allocation.PortHold``)."""
        from autodist.runner.allocation import PortHold
        for address, runner in self._runners.items():
            taken = [h.port for h in self._port_holds.values()]
            self._port_holds[address] = PortHold(runner, exclude=taken, python=self._python_for(runner))
        return {address: host_port(address, hold.port) for address, hold in self._port_holds.items()}

    def _stage(self, strategy_path, staged=()):
        for address, runner in self._runners.items():
            self._created.add(address)   # before it exists: a stop from now on removes it
            stage_job_dir(address, runner, self._python_for(runner), self._workdir, strategy_path, staged,
                          self._ready_timeout)

    def _serve_chief(self):
        chief = {n.address: n for n in self.spec.node_specs}[self.spec.chief]
        start_in_process(self.context.cluster_spec(), self.context.task_index, cpu_count_of(chief),
                         self.context.chief_task, chief.threads, chief.cores)

    def _start_workers(self, argv, cwd):
        for node in self.spec.node_specs:
            if node.address == self.spec.chief:
                continue
            runner = self._runners[node.address]
            context = dataclasses.replace(self.context.for_node(
                node.address, posixpath.join(self._workdir, STRATEGY_FILE), self._workdir), serves=True)
            env = dict(context.to_env(), PYTHONUNBUFFERED="1", **self._worker_env)
            self._workers[node.address] = runner.run([self._python_for(runner)] + list(argv), env=env, cwd=cwd,
                                                     log_path=self.logs.file(node.address, "worker"))

    # -- watch -----------------------------------------------------------------------
    def failure(self):
        """The first failure of the job (a ``RemoteWorkerError``), or None."""
        with self._lock:
            if self._failure is not None:
                self._delivered = True
            return self._failure

    def _check(self, handle):
        """The failure ``handle`` (a node's script) shows now, or None."""
        code = handle.poll()
        if code is None:
            return None
        if handle.connection_lost:
            runner = self._runners.get(handle.name)
            problem = runner.unreachable() if runner is not None else None
            if problem:   # a cut link or a machine that is gone, not a process that died
                return handle.failure("is unreachable: {}; the connection to it was lost while its training script "
                                      "ran (its process may still be running there)".format(problem))
            return handle.failure("failed: the connection to it was lost while its training script ran "
                                  "(exit code {})".format(code))
        if code == 0:
            return None
        return handle.failure("failed: its training script {}".format(describe_exit(code)))

    def _watch(self):
        while not self._stop.wait(self._poll):
            errors = (self._check(handle) for handle in self._workers.values())
            error = next((e for e in errors if e is not None), None) or self._stalled()
            if error is not None and not self._stop.is_set():
                self._fail(error)
                self._interrupt_unless_seen(error)
                return

    def _stalled(self):
        """A ``StallError`` when a step has made no progress for the stall timeout (``runtime.watch.stall``)."""
        if self._stall_timeout is None or self._monitor is None:
            return None
        runners = dict(self._runners)
        return job_stall(self.job_id, self.spec.chief, self._monitor, self._workers, self._stall_timeout, self._sink,
                         reach=lambda address: runners[address].unreachable() if address in runners else None)

    def _fail(self, error):
        with self._lock:
            if self._failure is None:
                self._failure = error
        self._terminate_all()

    def _terminate_all(self):
        if self._release_first:
            self._remove_workdirs()
        threads = [threading.Thread(target=h.terminate, daemon=True) for h in self.handles().values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)

    # -- interrupting a chief that is not looking ----------------------------------------
    def _still_stopping(self, what):
        """A second signal while the job is being stopped: the stop goes on, never cut short."""
        left = sum(1 for h in self.handles().values() if h.poll() is None)
        self._say_while_stopping("job {}: {} received while stopping the job; still stopping it ({} "
                                 "process(es) left)".format(self.job_id, what, left))

    def _interrupt_unless_seen(self, error):
        deadline = time.monotonic() + (self._interrupt_after or 0.0)
        while time.monotonic() < deadline:
            with self._lock:
                if self._delivered or self._finishing:
                    return
            time.sleep(0.1)
        with self._lock:
            if self._delivered or self._finishing or not self._signals.can_interrupt:
                return
            self._delivered = True
            self._signals.arm(error)
        write_line(ANNOUNCE, self._sink, "job {}: {} failed; raising the error in the chief".format(
            self.job_id, error.host))
        self._signals.fire()

    # -- finish ----------------------------------------------------------------------
    def finish(self, timeout=120.0):
        """Wait for the other nodes' scripts, then stop everything; raises their failure, if any.

        Called once the chief's script has ended. A node that is still in one
        session call ``step_report.WAIT_FOR_CHIEF`` s later (and many times its usual
        step) waits for a step the chief will never take: the job is stopped
        then instead of after ``timeout``, and that is not the node's failure.
        """
        with self._lock:
            self._finishing = True
        try:
            self._await_scripts(timeout)
        finally:
            self.abort()
        failure = self.failure()
        if failure is not None:
            raise failure

    def _await_scripts(self, timeout):
        if self._stop.is_set():   # aborted (SIGTERM, an error): we stopped the scripts ourselves
            return
        ended = time.monotonic()
        pending = dict(self._workers)
        while pending and self.failure() is None:
            for address, handle in list(pending.items()):
                if handle.poll() is None and script_done(handle.report):   # ended; its process still serves
                    del pending[address]
                elif handle.poll() is not None:
                    del pending[address]
                    error = self._check(handle)
                    if error is not None:
                        self._fail(error)
                        return
            waiting = {a: waiting_for_chief(h.report, ended) for a, h in pending.items()}
            if pending and all(waiting.values()):
                self.abort(reason="the chief's script has ended while {} still wait{} for it ({})".format(
                    " and ".join(sorted(pending)), "s" if len(pending) == 1 else "", "; ".join(
                        "{}: session call {} running for {:.0f} s, its calls take {:.3f} s".format(a, *waiting[a])
                        for a in sorted(pending))))
                return
            if pending and time.monotonic() - ended > timeout:
                handle = pending[sorted(pending)[0]]
                self._fail(handle.failure("failed: its training script was still running {:.0f} s after the "
                                          "chief's had finished".format(timeout)))
                return
            time.sleep(FINISH_POLL)

    def _remove_workdirs(self):
        """Remove the job directory on every node where it was made (once)."""
        for address, runner in list(self._runners.items()):
            if address in self._created:
                self._created.discard(address)
                try:
                    runner.remove_tree(self._workdir)
                except (OSError, LaunchError, ValueError) as e:
                    self._say_while_stopping("job {}: could not remove {} on {}: {}".format(
                        self.job_id, self._workdir, address, e))

    def _say_while_stopping(self, line):
        """A line of the stop; a console that is gone (``autodist run ... | head``, a dead parent's pipe)
        does not keep the job's processes from being stopped."""
        try:
            write_line(ANNOUNCE, self._sink, line)
        except (OSError, ValueError):   # BrokenPipeError; a closed stream
            pass

    def abort(self, reason=None):
        """Stop every process of the job now and remove its directories; idempotent.

        ``reason`` is announced first. Signals that arrive meanwhile do not cut
        the stop short; the chief's own signal handlers come back at the end.
        """
        with self._lock:
            first = self._cleanup == "none" and self._failure is None   # a failure tells its own story
            self._finishing = True
            self._cleanup = "running"
        if reason and first:
            self._say_while_stopping("job {}: {}; stopping every process of the job".format(self.job_id, reason))
        self._stop.set()
        release_ports(self._port_holds.values())
        try:
            self._terminate_all()
            self._remove_workdirs()
            for runner in list(self._runners.values()):
                runner.close()
            self._runners.clear()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(5)
        finally:
            self._cleanup = "done"
            self.logs.release()   # the job has ended: later jobs may prune its logs
            self._signals.restore()
            if self._whole_lines is not None:
                self._whole_lines.uninstall()
                self._whole_lines = None

