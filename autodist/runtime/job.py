"""This process's part in one job: start it (the chief) or join it, reopen its session, finish it.

``autodist.api`` is a thin face over this one entry::

    AutoDist(spec, builder, job=, launch_argv=)  Job(spec, builder, context=job, launch_argv=, environ=os.environ)
    ad.create_distributed_session()         job.open(graph_item)
        chief, no job yet                       build + compile the strategy, then
                                                one node:  a TensorFlow server in this process
                                                several:   Coordinator.launch (runtime.launch.coordinator):
                                                           this process's server, then a runner
                                                           per node (autodist.runner) starting
                                                           the script there
        member of a job                         the chief writes the strategy, the others read it
                                                (and the chief's calibration, for AutoStrategy)
        (launched by a chief, or given a JobContext)   a launched member's process hosts its node's
                                                server from AutoDist() on (runtime.launch.member_server)
        every node                              open_node_session (runtime.session.node)
        every node, every session               job.on_session callbacks (restore-or-initialize, saves)
    ad.function, after the graph grew       job.reopen(graph_item)
    sys.exit(code) inside ad.scope()        job.chief_exiting(code)
    ad.finish_job(...)                      job.finish(...); without a call, at the chief's exit

Under a supervisor (``runtime.recovery.restart``: ``autodist run --max-restarts``,
``AutoDist(max_restarts=)``) a new chief is attempt k (``ATTEMPT_ENV``): its
job failing through another node ends it with ``NODE_FAILED`` (the supervisor
then starts attempt k+1), and from the second attempt on, with ``min_nodes``,
nodes that fail preflight are left out (``runtime.recovery.shrink``).

How a job ends in every case (bounded waits, statuses, signals) is told in
``docs/running.md``, "How a job ends". What the chief hands the other nodes
(the strategy, its calibration, the argv) is ``runtime.strategy_handoff``; the
session's tracer and scalar log, ``runtime.watch.views``.
"""
import atexit
import dataclasses
import os
import shutil
import tempfile
import time
import weakref

from autodist.errors import LaunchError, RemoteWorkerError, SessionError
from autodist.runtime.context import JobContext
from autodist.runtime.ending import JobEnding, close_at_exit, leave_if_stuck
from autodist.runtime.launch.coordinator import Coordinator
from autodist.runtime.elastic.attempt import ElasticAttempt
from autodist.runtime.elastic.membership import with_hosts
from autodist.runtime.elastic.preemption import install_member_handler
from autodist.runner.srun import pick_launcher
from autodist.runtime.launch.member_server import serve
from autodist.runtime.session.node import open_node_session
from autodist.runtime.notices import notice
from autodist.runtime.watch.progress import Progress
from autodist.runtime.recovery.restart import NODE_FAILED, attempt_of
from autodist.runtime.recovery.shrink import leave_out_unreachable, plan_change, restricted
from autodist.runtime.watch.stall import DEFAULT_STALL_TIMEOUT, member_stall
from autodist.runtime.watch.step_report import ReportWriter, StepMonitor
from autodist.runtime.watch.straggler import start_link_views
from autodist.runtime.watch.views import JobViews
from autodist.runtime.launch.node import runner_factory, single_node_job
from autodist.plan.strategy import Strategy
from autodist.runtime.join.platform import EXIT_RETRY, Handoff, platform_versions
from autodist.runtime.join.servers_up import await_servers
from autodist.runtime.strategy_handoff import (adopt_calibration, build_strategy, calibration_from_dict,
                                               check_fingerprint, keep_calibration, load_strategy, script_argv,
                                               with_accumulation, write_calibration, write_fingerprint)
from autodist.capture.fingerprint import check_same_graph, fingerprint
from autodist.spec.cluster import cpu_count_of

__all__ = ["Job", "build_strategy", "load_strategy", "script_argv", "EXIT_NODE_FAILED"]

EXIT_NODE_FAILED = 1   # the chief's status when another node's script failed (as `autodist run`)


class Job(JobEnding):
    """This process's part in one job (see the module docstring).

    ``context`` attaches this process to a job whose servers someone else
    started (``autodist.runtime.context.JobContext``); without it, a process
    launched by an autodist chief finds its context in ``environ``
    (``AUTODIST_JOB``), and any other process is the chief of a new job.
    ``launch_argv`` is what the other nodes run after ``python`` (default:
    this script and its arguments). ``trace_dir`` turns on the merged
    timeline (``autodist.runtime.watch.timeline``), ``logdir`` TensorBoard scalars
    (``autodist.runtime.watch.summaries``); every node gets the same values (its script's arguments).
    ``verbose``: the console shows every line the other nodes print,
    TensorFlow's chatter included (``autodist.runner.console``). ``progress``:
    the chief shows a progress line once its session is open
    (``autodist.runtime.watch.progress``), with an ETA when ``total_steps``
    (session calls) is given. ``stall_timeout``: seconds a step may make
    no progress before the chief reports the stall and fails the job
    (``autodist.runtime.watch.stall``; None: never); a launched node gives up on a
    call ``stall.MEMBER_GRACE`` s later by itself (the chief is stopped or frozen).
    ``min_nodes``: a relaunch leaves out the nodes that fail preflight while at
    least that many remain (``autodist.runtime.recovery.shrink``).
    ``launcher``: how the chief starts the other nodes, ``"ssh"`` or ``"srun"``
    (Slurm job steps); None: srun inside a Slurm allocation (``SLURM_JOB_NODELIST``
    in ``environ``), else ssh. ``accumulation_steps``: gradients are accumulated
    over that many calls of a train op before one synchronized update
    (``autodist.kernel.accumulate``; None: as the optimizer asks, else every call).
    """

    def __init__(self, resource_spec, strategy_builder=None, *, context=None, launch_argv=None, environ=None,
                 trace_dir=None, logdir=None, verbose=False, progress=False, total_steps=None,
                 stall_timeout=DEFAULT_STALL_TIMEOUT, min_nodes=None, launcher=None, accumulation_steps=None,
                 platform=None):
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
        self.checkpoints = None   # ``autodist run --checkpoint-dir``'s (``runtime.autorun.checkpoints``), or None
        self.after_success = []   # callables once the whole job ended well (``JobEnding.succeeded``)
        self._builder = strategy_builder
        self._launch_argv = list(launch_argv) if launch_argv is not None else None
        env_context = JobContext.from_env(environ) if context is None and environ is not None else None
        self._launched_by_chief = env_context is not None
        self._platform = platform   # a job the platform started (``runtime.join``): every process joins it
        self.on_handoff = []        # callables(the chief's worker_env), on the other processes of such a job
        self._context = platform.context if platform is not None else context if context is not None else env_context
        if self._context is not None:   # an elastic job's hosts that joined through the spec's node template
            resource_spec = with_hosts(resource_spec, self._context.addresses)
        self._parent = os.getppid()
        self._coordinator = None
        self._node_failed = False   # the job ended through another node's failure (``ending.leave_if_stuck``)
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
        if platform is not None:   # its server, once every process of the job started its own
            platform.start({n.address: n for n in resource_spec.node_specs}[self._context.address])
            atexit.register(self._platform_exit)
        atexit.register(leave_if_stuck, weakref.ref(self))   # the last exit work of the job
        atexit.register(close_at_exit, weakref.ref(self))   # after the job's own exit work (registered later)
        self.attempt = attempt_of(environ) if self._context is None else None   # a supervised new chief's number
        self.node_failure_status = NODE_FAILED if self.attempt else EXIT_NODE_FAILED
        if platform is not None:
            self.node_failure_status = EXIT_RETRY
        self.elastic = ElasticAttempt.of_chief(environ, self) if self._context is None else None
        if self._launched_by_chief:   # in an elastic job, a preemption notice tells the chief first
            install_member_handler(environ, self._monitor, self._context)
        if self._context is not None:   # the nodes the chief launched (fewer after a shrink)
            self._spec = restricted(resource_spec, self._context.addresses)
        elif self.elastic is not None:   # the nodes the elastic supervisor chose (runtime.elastic)
            self._spec, self._full_spec = self.elastic.specs(resource_spec)
            self.worker_env.update(self.elastic.worker_env)
            self.on_session.append(self.elastic.attach)
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

    @property
    def steps_trained(self):
        """This node's session calls that ran a training op so far."""
        return self._monitor.trained

    def member_reports(self):
        """{address: the latest report of that node's script} (``runtime.step_report``; the chief of a launched job)."""
        handles = self._coordinator.handles() if self._coordinator is not None else {}
        return {a: h.report[1] for (a, role), h in handles.items() if role == "worker" and h.report is not None}

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
            atexit.register(self._stop_watches)
        return self._session

    def _progress_sample(self):
        """The chief's own step counts and the latest report of every other node's script."""
        samples = {self._spec.chief: (time.monotonic(), self._monitor.snapshot())}
        if self._coordinator is not None:
            samples.update({address: handle.report for (address, role), handle in self._coordinator.handles().items()
                            if role == "worker" and handle.report is not None})
        return samples

    def _stop_watches(self):
        """The progress line, the straggler watch and the link meter end with the job (not the report writer: the
        chief reads from it that this node's script has ended)."""
        if self._progress is not None:
            self._progress.stop()
        if self._straggler:
            self._straggler.stop()
        if self._monitor.meter is not None:
            self._monitor.meter.stop()

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

    def _launch(self, item, strategy, job_id, calibration):
        argv = self._launch_argv if self._launch_argv is not None else script_argv()
        staging = tempfile.mkdtemp(prefix="autodist-")
        try:   # the staged copy goes also when the launch fails (preflight, a signal)
            path = strategy.serialize(os.path.join(staging, "strategy.pb"))
            staged = [write_fingerprint(staging, item)]   # every node checks it captured the same graph
            staged += [write_calibration(staging, calibration)] if calibration is not None else []
            self._coordinator = coordinator = Coordinator(
                self._spec, job_id, verbose=self._verbose, monitor=self._monitor, stall_timeout=self._stall_timeout,
                worker_env=self.worker_env, before_term=self._before_term,
                runner_factory=runner_factory(self._launcher), release_first=self.elastic is not None)
            atexit.register(self._finish_at_exit)
            context = coordinator.launch(path, argv, os.getcwd(), serve_chief=True, staged=staged)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self._session_args = (context, coordinator.failure, coordinator.abort)
        return open_node_session(item, strategy, context, self._spec, failure=coordinator.failure,
                                 on_interrupt=coordinator.abort, monitor=self._monitor,
                                 **self._views(context, strategy, item))

    def _join(self, item):
        if self._platform is not None:
            return self._join_platform(item)
        context = self._context
        path = os.path.expanduser(context.strategy_path)
        if context.is_chief:
            calibration = self._keep_calibration()
            if calibration is not None:   # before the strategy, for which the others wait
                write_calibration(os.path.dirname(path), calibration)
            write_fingerprint(os.path.dirname(path), item)
            strategy = self._build_strategy(item, self._spec)
            strategy.serialize(path)
        else:
            strategy = load_strategy(context)
            check_fingerprint(path, item, context.address, context.chief)
            self._builder = adopt_calibration(self.strategy_builder, path)
        failure = self._chief_lost if self._launched_by_chief else None
        self._session_args = (context, failure, None)
        if self._launched_by_chief:
            await_servers(context)
        if self._launched_by_chief and self._reporter is None:
            self._reporter = ReportWriter(self._monitor).start()
        return open_node_session(item, strategy, context, self._spec, failure=failure, monitor=self._monitor,
                                 **self._views(context, strategy, item))

    def _join_platform(self, item):
        """A platform-started job: the chief plans and sends the plan, the others receive it (``runtime.join``)."""
        platform, context = self._platform, self._context
        if context.is_chief:
            calibration = self._keep_calibration()
            strategy = self._build_strategy(item, self._spec)
            platform.send_plan(Handoff(strategy.to_bytes(), self._spec.to_dict(),
                                       calibration.to_dict() if calibration is not None else None,
                                       dict(self.worker_env), platform_versions(), fingerprint(item)))
        else:
            handoff = platform.receive_plan()
            if handoff.spec != self._spec.to_dict():
                raise LaunchError("{} sees another job than the chief: its spec {} against the chief's {} (the "
                                  "processes' environments differ: AUTODIST_CPUS_PER_NODE, GPUs...)".format(
                                      context.address, self._spec.to_dict(), handoff.spec))
            check_same_graph(handoff.fingerprint, fingerprint(item), context.address, context.chief)
            strategy = Strategy.from_bytes(handoff.strategy, "the chief's plan")
            if handoff.calibration is not None:
                self._builder = self.strategy_builder.with_calibration(calibration_from_dict(handoff.calibration))
            for callback in self.on_handoff:
                callback(handoff.worker_env)
        self._session_args = (context, platform.failure, None)
        return open_node_session(item, strategy, context, self._spec, failure=platform.failure,
                                 monitor=self._monitor, **self._views(context, strategy, item))

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
        """A new session on the running job for ``graph_item`` as it is now (``autodist.runtime.session.function``).

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
        """The session's tracer and scalar log (``runtime.watch.views``): made with the first session."""
        return self._job_views.for_session(context, strategy, item, self._spec)
