"""This process's part in one job: start it (the chief) or join it, reopen its session, finish it.

``autodist.api`` is a thin face over this one entry::

    AutoDist(spec, builder, job=, launch_argv=)  Job(spec, builder, context=job, launch_argv=, environ=os.environ)
    ad.create_distributed_session()         job.open(graph_item)
        chief, no job yet                       build + compile the strategy, then
                                                one node:  a TensorFlow server in this process
                                                several:   Coordinator.launch (runtime.coordinator):
                                                           this process's server, then a runner
                                                           per node (autodist.runner) starting
                                                           the script there
        member of a job                         the chief writes the strategy, the others read it
                                                (and the chief's calibration, for AutoStrategy)
        (launched by a chief, or given a JobContext)   a launched member's process hosts its node's
                                                server from AutoDist() on (runtime.member_server)
        every node                              open_node_session (runtime.node_session)
        every node, every session               job.on_session callbacks (restore-or-initialize, saves)
    ad.function, after the graph grew       job.reopen(graph_item)
    sys.exit(code) inside ad.scope()        job.chief_exiting(code)
    ad.finish_job(...)                      job.finish(...); without a call, at the chief's exit

Under a supervisor (``runtime.restart``: ``autodist run --max-restarts``,
``AutoDist(max_restarts=)``) a new chief is attempt k (``ATTEMPT_ENV``): its
job failing through another node ends it with ``NODE_FAILED`` (the supervisor
then starts attempt k+1), and from the second attempt on, with ``min_nodes``,
nodes that fail preflight are left out (``runtime.shrink``).

How a job ends in every case (bounded waits, statuses, signals) is told in
``docs/running.md``, "How a job ends". What the chief hands the other nodes
(the strategy, its calibration, the argv) is ``runtime.strategy_handoff``; the
session's tracer and scalar log, ``runtime.job_views``.
"""
import atexit
import dataclasses
import logging
import os
import shutil
import sys
import tempfile
import time
import weakref

from autodist.errors import LaunchError, RemoteWorkerError, SessionError
from autodist.runtime.context import JobContext
from autodist.runtime.coordinator import Coordinator
from autodist.runner.srun import pick_launcher
from autodist.runtime.member_server import note_exit, serve
from autodist.runtime.node_session import open_node_session
from autodist.runtime.notices import notice
from autodist.runtime.progress import Progress
from autodist.runtime.restart import NODE_FAILED, attempt_of
from autodist.runtime.shrink import leave_out_unreachable, plan_change, restricted
from autodist.runtime.stall import DEFAULT_STALL_TIMEOUT, member_stall
from autodist.runtime.step_report import ReportWriter, StepMonitor
from autodist.runtime.straggler import start_link_views
from autodist.runtime.job_views import JobViews
from autodist.runtime.node_launch import runner_factory, single_node_job
from autodist.runtime.strategy_handoff import (build_strategy, keep_calibration, load_strategy, script_argv,
                                               with_accumulation,
                                               shipped_calibration, write_calibration)
from autodist.spec.cluster import cpu_count_of

__all__ = ["Job", "build_strategy", "load_strategy", "script_argv", "EXIT_NODE_FAILED"]

EXIT_NODE_FAILED = 1   # the chief's status when another node's script failed (as `autodist run`)


class Job:
    """This process's part in one job (see the module docstring).

    ``context`` attaches this process to a job whose servers someone else
    started (``autodist.runtime.context.JobContext``); without it, a process
    launched by an autodist chief finds its context in ``environ``
    (``AUTODIST_JOB``), and any other process is the chief of a new job.
    ``launch_argv`` is what the other nodes run after ``python`` (default:
    this script and its arguments). ``trace_dir`` turns on the merged
    timeline (``autodist.runtime.timeline``), ``logdir`` TensorBoard scalars
    (``autodist.runtime.summaries``); every node gets the same values (its script's arguments).
    ``verbose``: the console shows every line the other nodes print,
    TensorFlow's chatter included (``autodist.runner.console``). ``progress``:
    the chief shows a progress line once its session is open
    (``autodist.runtime.progress``), with an ETA when ``total_steps``
    (session calls) is given. ``stall_timeout``: seconds a step may make
    no progress before the chief reports the stall and fails the job
    (``autodist.runtime.stall``; None: never); a launched node gives up on a
    call ``stall.MEMBER_GRACE`` s later by itself (the chief is stopped or frozen).
    ``min_nodes``: a relaunch leaves out the nodes that fail preflight while at
    least that many remain (``autodist.runtime.shrink``).
    ``launcher``: how the chief starts the other nodes, ``"ssh"`` or ``"srun"``
    (Slurm job steps); None: srun inside a Slurm allocation (``SLURM_JOB_NODELIST``
    in ``environ``), else ssh. ``accumulation_steps``: gradients are accumulated
    over that many calls of a train op before one synchronized update
    (``autodist.kernel.accumulate``; None: as the optimizer asks, else every call).
    """

    def __init__(self, resource_spec, strategy_builder=None, *, context=None, launch_argv=None, environ=None,
                 trace_dir=None, logdir=None, verbose=False, progress=False, total_steps=None,
                 stall_timeout=DEFAULT_STALL_TIMEOUT, min_nodes=None, launcher=None, accumulation_steps=None):
        self._spec = self._full_spec = resource_spec
        self._accumulation = accumulation_steps
        self._launcher = pick_launcher(launcher, environ if environ is not None else {})
        self._job_views = JobViews(trace_dir, logdir)   # the views (``_views``); None: off
        self._verbose = verbose
        self._progress_wanted = (progress, total_steps)
        self._progress = None
        self._straggler = None   # the chief's StragglerWatch (False: none on this node)
        self._stall_timeout = stall_timeout
        self.worker_env = {}   # more environment for the other nodes' scripts, set before ``open``
        self.before_term = []  # callables run when SIGTERM reaches the chief, before the job stops
        self.on_session = []   # callables(session, first) for every session this node opens
        self._builder = strategy_builder
        self._launch_argv = list(launch_argv) if launch_argv is not None else None
        env_context = JobContext.from_env(environ) if context is None and environ is not None else None
        self._launched_by_chief = env_context is not None
        self._context = context if context is not None else env_context
        self._parent = os.getppid()
        self._coordinator = None
        self._node_failed = False   # the job ended through another node's failure (``_leave_if_stuck``)
        self._session = None
        self._session_args = None   # (JobContext, failure, on_interrupt) of the running job
        self._generation = 0
        self._monitor = StepMonitor()   # this node's session calls, reported to the chief by launched nodes
        self._reporter = None
        if self._context is not None and self._context.address not in {n.address for n in resource_spec.node_specs}:
            raise LaunchError("this process belongs to node {} of job {}, which is not in {}".format(
                self._context.address, self._context.job_id, resource_spec.path))
        if self._launched_by_chief and self._context.serves:   # this process hosts its node's server
            node = {n.address: n for n in resource_spec.node_specs}[self._context.address]
            serve(self._context, cpu_count_of(node), node.threads, self._monitor, cores=node.cores)
        atexit.register(_leave_if_stuck, weakref.ref(self))   # the last exit work of the job
        atexit.register(_close_at_exit, weakref.ref(self))   # after the job's own exit work (registered later)
        self.attempt = attempt_of(environ) if self._context is None else None   # a supervised new chief's number
        self.node_failure_status = NODE_FAILED if self.attempt else EXIT_NODE_FAILED
        if self._context is not None:   # the nodes the chief launched (fewer after a shrink)
            self._spec = restricted(resource_spec, self._context.addresses)
        elif min_nodes and self.attempt and self.attempt > 1:
            self._spec, _ = leave_out_unreachable(resource_spec, min_nodes, lambda text: notice(
                None, "attempt {}: {}".format(self.attempt, text)), runner_factory=runner_factory(self._launcher))

    @property
    def resource_spec(self):
        """The spec of the job's nodes: the one given, or fewer nodes (``min_nodes``, a job context)."""
        return self._spec

    @property
    def strategy_builder(self):
        """The builder given, or AutoDist's default, PSLoadBalancing."""
        if self._builder is None:
            from autodist.strategies import PSLoadBalancing
            self._builder = PSLoadBalancing()
        return self._builder

    @property
    def session(self):
        """This node's current DistributedSession, or None before ``open``."""
        return self._session

    @property
    def is_chief(self):
        return self._context is None or self._context.is_chief

    @property
    def worker_index(self):
        """This node's task index (its address's rank in task order)."""
        if self._context is not None:
            return self._context.task_index
        return self._spec.task_index(self._spec.chief)

    @property
    def num_workers(self):
        return len(self._spec.node_specs)

    # -- start / join ------------------------------------------------------------------
    def open(self, graph_item):
        """This node's first session: the chief starts the job, a member joins it."""
        self._session = self._start(graph_item) if self._context is None else self._join(graph_item)
        for callback in self.on_session:
            callback(self._session, True)
        if len(self._spec.node_specs) > 1 and self._straggler is None:   # each node meters its link
            self._straggler = start_link_views(self._monitor, self._progress_sample if self._coordinator else None,
                                               self._spec.chief) or False
        wanted, total_steps = self._progress_wanted
        if wanted and self.is_chief and self._progress is None:
            self._progress = Progress(self._progress_sample, self._spec.chief, total_steps).start()
            atexit.register(self._stop_progress)
        return self._session

    def _progress_sample(self):
        """The chief's own step counts and the latest report of every other node's script."""
        samples = {self._spec.chief: (time.monotonic(), self._monitor.snapshot())}
        if self._coordinator is not None:
            samples.update({address: handle.report for (address, role), handle in self._coordinator.handles().items()
                            if role == "worker" and handle.report is not None})
        return samples

    def _stop_progress(self):
        if self._progress is not None:
            self._progress.stop()
        if self._straggler:
            self._straggler.stop()

    def _start(self, item):
        from autodist.runner import new_job_id
        job_id = new_job_id()
        # a launching chief may measure the cluster first (AutoStrategy), over the nodes' own launcher
        calibration = self._keep_calibration(may_probe=self._launcher == "ssh")
        strategy = self._build_strategy(item, self._spec)
        if self._spec is not self._full_spec:   # shrunk at this relaunch: say how the plan changed
            before = self._build_strategy(item, self._full_spec)
            notice(None, plan_change(self._full_spec, self._spec, self.strategy_builder, *(
                len(s.graph_config.replicas) for s in (before, strategy))))
        if len(self._spec.node_specs) == 1:
            context = single_node_job(self._spec, job_id)
            self._session_args = (context, None, None)
            return open_node_session(item, strategy, context, self._spec, monitor=self._monitor,
                                     **self._views(context, strategy, item))
        return self._launch(item, strategy, job_id, calibration)

    def _build_strategy(self, item, spec):
        return with_accumulation(build_strategy(item, spec, self.strategy_builder), item, self._accumulation)

    def _keep_calibration(self, may_probe=False):
        """The chief's calibration for its builder, fixed for the job (``strategy_handoff.keep_calibration``)."""
        self._builder, calibration = keep_calibration(self.strategy_builder, self._spec, may_probe)
        return calibration

    def _adopt_calibration(self, strategy_path):
        """A member plans as the chief does: with the calibration shipped next to the strategy, if any."""
        calibration = shipped_calibration(strategy_path)
        if calibration is not None:
            self._builder = self.strategy_builder.with_calibration(calibration)

    def _launch(self, item, strategy, job_id, calibration):
        argv = self._launch_argv if self._launch_argv is not None else script_argv()
        staging = tempfile.mkdtemp(prefix="autodist-")
        try:   # the staged copy goes also when the launch fails (preflight, a signal)
            path = strategy.serialize(os.path.join(staging, "strategy.pb"))
            staged = [write_calibration(staging, calibration)] if calibration is not None else []
            self._coordinator = coordinator = Coordinator(
                self._spec, job_id, verbose=self._verbose, monitor=self._monitor, stall_timeout=self._stall_timeout,
                worker_env=self.worker_env, before_term=self._before_term,
                runner_factory=runner_factory(self._launcher))
            atexit.register(self._finish_at_exit)
            context = coordinator.launch(path, argv, os.getcwd(), serve_chief=True, scripts_serve=True,
                                         staged=staged)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._session_args = (context, coordinator.failure, coordinator.abort)
        return open_node_session(item, strategy, context, self._spec, failure=coordinator.failure,
                                 on_interrupt=coordinator.abort, monitor=self._monitor,
                                 **self._views(context, strategy, item))

    def _join(self, item):
        context = self._context
        path = os.path.expanduser(context.strategy_path)
        if context.is_chief:
            calibration = self._keep_calibration()
            if calibration is not None:   # before the strategy, for which the others wait
                write_calibration(os.path.dirname(path), calibration)
            strategy = self._build_strategy(item, self._spec)
            strategy.serialize(path)
        else:
            strategy = load_strategy(context)
            self._adopt_calibration(path)
        failure = self._chief_lost if self._launched_by_chief else None
        self._session_args = (context, failure, None)
        if self._launched_by_chief and self._reporter is None:
            self._reporter = ReportWriter(self._monitor).start()
        return open_node_session(item, strategy, context, self._spec, failure=failure, monitor=self._monitor,
                                 **self._views(context, strategy, item))

    def _before_term(self):
        for callback in self.before_term:
            callback()

    def _chief_gone(self):
        if os.getppid() != self._parent:
            return RemoteWorkerError(self._context.chief, reason="the chief process is gone")
        return None

    def _chief_lost(self):
        """A launched node's view of the chief: its process is gone, or it let a call run far past the stall timeout."""
        return self._chief_gone() or member_stall(self._monitor, self._context.address, self._context.chief,
                                                  self._stall_timeout)

    # -- reopen ------------------------------------------------------------------------
    def reopen(self, graph_item):
        """A new session on the running job for ``graph_item`` as it is now (``autodist.runtime.function``).

        A function traced after the session exists grows the graph, which the
        session refuses to run. Every node runs the same script and gets here at
        the same call; each builds the strategy itself (builders are pure
        functions of graph and spec; AutoStrategy's also of the chief's
        calibration, which every node kept at the start) and the session gets its own job id,
        ``<job>-g<n>-<strategy id>``: fresh containers and collective keys (derived
        from that id, also when the job injected a key base), and nodes that
        planned differently never meet. The caller moves the
        variables' values over (``autodist.checkpoint.binding``).
        """
        if self._session is None or self._session_args is None:
            raise SessionError("no distributed session to replace; call create_distributed_session() first")
        graph_item.prepare()
        context, failure, on_interrupt = self._session_args
        strategy = self._build_strategy(graph_item, self._spec)
        self._generation += 1
        generation = dataclasses.replace(context, job_id="{}-g{}-{}".format(
            context.job_id, self._generation, strategy.id[:8]), collective_key_base=0)
        self._session = open_node_session(graph_item, strategy, generation, self._spec, failure=failure,
                                          on_interrupt=on_interrupt, monitor=self._monitor,
                                          **self._views(generation, strategy, graph_item))
        for callback in self.on_session:
            callback(self._session, False)
        return self._session

    # -- views -------------------------------------------------------------------------
    @property
    def scalars(self):
        """This node's ScalarLog (``logdir``), or None."""
        return self._job_views.scalars

    def _views(self, context, strategy, item):
        """The session's tracer and scalar log (``runtime.job_views``): made with the first session."""
        return self._job_views.for_session(context, strategy, item, self._spec)

    # -- finish ------------------------------------------------------------------------
    def finish(self, abort=False, timeout=120.0, reason=None):
        """End the job this chief launched (``AutoDist.finish_job``): wait up to ``timeout`` s for the
        other nodes' scripts (``abort``: stop them now, announcing ``reason``), stop every process of
        the job, remove its directories, and raise the first ``RemoteWorkerError``. A no-op on other
        nodes and when done already."""
        self._stop_progress()
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is None:
            return
        try:
            if not abort:
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
        serve (``runtime.member_server``).
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
        self._stop_progress()
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
                _leave_with(self.node_failure_status)   # another node failed: the supervisor restarts
            return
        try:
            coordinator.finish()
        except RemoteWorkerError as e:
            self._node_failed = True
            print("autodist: error: {}".format(e), file=sys.stderr, flush=True)
            _leave_with(self.node_failure_status)


def _leave_if_stuck(job_ref):
    """After another node failed, leave with the node-failure status while a step still waits for it.

    A step waiting for a node behind a cut link (silence, no reset) may return during Python's
    finalization, whose end of a daemon thread then aborts the process (134) instead.
    """
    job = job_ref()
    if job is None or not job._node_failed:
        return
    from autodist.runtime.session import calls_in_flight
    if calls_in_flight():
        _leave_with(job.node_failure_status)


def _close_at_exit(job_ref):
    """Close the job's session at exit if the script did not: a session left open reports errors from
    TensorFlow's callables once TensorFlow is unloaded."""
    job = job_ref()
    close = getattr(job.session, "close", None) if job is not None else None
    if close is not None:
        close()


def _leave_with(status):
    """End the process with ``status`` from an atexit handler, after flushing what it wrote."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    logging.shutdown()
    os._exit(status)  # see Job._finish_at_exit: at exit there is no other way to set the status

