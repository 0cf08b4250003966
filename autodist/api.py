"""The user API: ``AutoDist(resource_spec_file, strategy_builder)``.

    ad = AutoDist("resource_specs/loopback_two_nodes.yml", strategy_builder=PS())
    with tf.Graph().as_default(), ad.scope():
        ...build the single-device model, loss, optimizer and train op...
        sess = ad.create_distributed_session()
        for batch in my_share_of_the_data(ad.worker_index, ad.num_workers):
            sess.run(train_op, feed_dict={...})

Inside ``scope()`` the current default graph is wrapped in a GraphItem that is
the default GraphItem, and optimizer construction and ``apply_gradients`` are
captured into it (see ``autodist.capture.optimizers``); on exit, also after an
exception, TensorFlow and Keras are exactly as before.

A thin face: the job behind the object (starting it on the chief, joining it
on the other nodes, reopening its session, finishing it) is
``autodist.runtime.job.Job``. The other nodes run the same script with their
place in the job in ``AUTODIST_JOB``, which is read here, once, when AutoDist
is constructed.

Surviving a failed node (``docs/running.md``, "Surviving a failed node")::

    ad = AutoDist(spec, AllReduce(), max_restarts=3, checkpoint_dir="ckpt", save_every=50)

``max_restarts``: the chief's process becomes a supervisor at this call, before
any graph is built. It runs the script again from its start, as a chief of
a new job, for each attempt (``runtime.recovery.restart.supervise_script``), and exits with
the last attempt's status; ``AutoDist(...)`` returns only inside the attempts
(and on the other nodes). ``checkpoint_dir`` / ``save_every``: restore the newest
checkpoint when the session is created (every node) and let the chief save
every ``save_every`` session calls (``checkpoint.resume.SessionCheckpoints``).
They belong to AutoDist, not to ``create_distributed_session``, because the
chief must tell the other nodes whether to restore when it launches them, and
because ``ad.function`` and Keras ``fit`` open sessions of their own.
``min_nodes``: a restart leaves out nodes that cannot be reached while at least
that many remain (``runtime.recovery.shrink``).
"""
import contextlib
import os
import sys

import tensorflow as tf

from autodist.capture.batch_norm import synchronized_batch_norm
from autodist.capture.datasets import attach as attach_uneven_inputs, auto_shard_policy, capture_datasets, \
    check_uneven_policy
from autodist.capture.graph_item import GraphItem
from autodist.capture.keras import guard_keras_loops, on_compile
from autodist.capture.optimizers import capture_optimizers
from autodist.errors import SessionError, StrategyError
from autodist.runtime.job import Job, script_argv
from autodist.runtime.limits import MAX_ACCUMULATION_STEPS, check_job_arguments
from autodist.runtime.notices import notice
from autodist.runtime.recovery.restart import attempt_of, supervise_script
from autodist.runtime.watch.stall import DEFAULT_STALL_TIMEOUT
from autodist.runtime.autorun.user_script import (SessionRequested, intercept_session_requests,
                                                 session_requests_intercepted)
from autodist.runtime.elastic import DEFAULT_SETTLE, batch_scale_of, elastic_settings, supervise_elastic
from autodist.runtime.elastic.membership import replica_count
from autodist.runtime.join.entry import platform_job

__all__ = ["AutoDist", "SessionRequested", "intercept_session_requests"]


class AutoDist:
    """Distributed training of a single-device graph over the devices of a resource spec.

    ``job`` attaches this process to a job whose servers were started by
    someone else (see ``autodist.runtime.context.JobContext``); by default a process
    launched by an autodist chief finds its job in the environment, and any
    other process is the chief of a new job. ``launch_argv`` is what the other
    nodes run after ``python`` (default: this script and its arguments).
    ``trace_dir`` writes a merged timeline of a few traced steps of every node
    to ``<trace_dir>/timeline.json``; ``logdir`` writes TensorBoard scalars
    per node (see ``docs/observability.md``). ``verbose``: show every line the
    other nodes print (TensorFlow's start-up chatter too); ``progress``: a
    progress line on the chief, with an ETA when ``total_steps`` (session
    calls) is given (see ``docs/running.md``, "The console").
    ``stall_timeout``: a step that makes no progress for that many seconds ends
    the job with a ``StallError`` naming the nodes that held it up (None: never).
    ``max_restarts`` (with ``restart_backoff`` s between attempts), ``min_nodes``,
    ``checkpoint_dir`` and ``save_every``: see the module docstring.
    Settings outside their range (``autodist.runtime.limits``: a negative
    ``total_steps``, an infinite ``restart_backoff``, more ``min_nodes`` than the
    spec has nodes...) raise ``ArgumentError`` before anything starts.
    ``launcher``: how the chief starts the other nodes, ``"ssh"`` or ``"srun"``
    (Slurm job steps, ``docs/slurm.md``); None: srun inside a Slurm allocation,
    else ssh. ``resource_spec_file`` may also be a loaded ``ResourceSpec``.
    ``accumulation_steps=k``: every train op sums its gradients locally over k
    calls and synchronizes and applies their mean once, on the k-th
    (``docs/large_batches.md``); None: as a Keras optimizer's own
    ``gradient_accumulation_steps`` asks, else every call.
    ``uneven_inputs``: when the nodes' ``tf.data`` inputs end at different steps,
    ``"end"`` ends the epoch for every node at the first node's end, ``"join"``
    lets a node without data contribute nothing while the others go on; each
    step's update is the mean over the rows the replicas held
    (``docs/input_pipelines.md``, "Uneven inputs"; None: the others wait for a
    node whose input ended, until the stall timeout). ``auto_shard``: ``"auto"``, ``"file"`` or
    ``"data"`` shards every dataset an iterator is made of in the scope over
    the nodes, as tf.distribute does (None / ``"off"``: shard it yourself).
    ``sync_batch_norm=True``: every Keras ``BatchNormalization`` built in the
    scope normalizes with the statistics of the whole job's batch, as
    ``synchronized=True`` asks of one layer (``docs/keras.md``).
    Elastic jobs (``docs/elastic.md``): ``elastic=True`` or ``host_discovery_script``
    makes the chief's process a supervisor (as ``max_restarts``) whose attempts
    run on the nodes available (the script's, at most ``max_nodes``, at least
    ``min_nodes``); a change of them, or ``preemption_signal`` to any node,
    saves a checkpoint at a step boundary and relaunches on the new set, the
    global batch kept (``keep_per_replica_batch``: the per-replica one, see
    ``batch_scale``); ``discovery_interval``, ``host_backoff``,
    ``preemption_grace`` in seconds; ``discovery_settle``: s a host must stay
    listed (or missing) before the job re-plans.

    Without ``resource_spec_file`` (or with one and ``AUTODIST_NODE_ADDRESS``)
    the process joins a job the platform started: Kubernetes' TF_CONFIG,
    ``srun --ntasks``, ``mpirun`` (``autodist.runtime.join``, docs/kubernetes.md);
    ``ready_timeout``: s it waits for the others at the start (default 600,
    ``AUTODIST_READY_TIMEOUT``).
    """

    def __init__(self, resource_spec_file=None, strategy_builder=None, *, job=None, launch_argv=None,
                 trace_dir=None, logdir=None, verbose=False, progress=False, total_steps=None,
                 stall_timeout=DEFAULT_STALL_TIMEOUT, max_restarts=0, restart_backoff=2.0, min_nodes=None,
                 checkpoint_dir=None, save_every=None, launcher=None, accumulation_steps=None, uneven_inputs=None,
                 auto_shard=None, elastic=False, host_discovery_script=None, max_nodes=None, discovery_interval=5.0,
                 host_backoff=60.0, preemption_signal="SIGTERM", preemption_grace=30.0, keep_per_replica_batch=False,
                 ready_timeout=None, discovery_settle=DEFAULT_SETTLE, sync_batch_norm=False):
        from autodist.spec.resource_spec import ResourceSpec
        _check_accumulation_steps(accumulation_steps)
        self._inputs = (check_uneven_policy(uneven_inputs), auto_shard_policy(auto_shard))
        self._sync_batch_norm = _check_switch("sync_batch_norm", sync_batch_norm)
        spec = resource_spec_file
        if spec is not None and not isinstance(spec, ResourceSpec):
            spec = ResourceSpec(spec)
        platform = platform_job(spec, job, max_restarts, ready_timeout, os.environ, lambda text: notice(None, text))
        self._resource_spec = platform.spec if platform is not None else spec
        elastic = None if platform is not None else elastic_settings(
            self._resource_spec, elastic, host_discovery_script, min_nodes, max_nodes, discovery_interval,
            host_backoff, preemption_signal, preemption_grace, max_restarts, restart_backoff, keep_per_replica_batch,
            settle=discovery_settle)
        check_job_arguments(self._resource_spec, total_steps, stall_timeout, max_restarts, restart_backoff, min_nodes,
                            restarted=attempt_of(os.environ) is not None or elastic is not None)
        self._graph_item = None
        self._own_graph = None   # the graph scope() enters under eager execution
        if (max_restarts or elastic) and job is None and _new_chief(os.environ):
            argv = launch_argv if launch_argv is not None else script_argv()
            sys.exit(supervise_elastic([sys.executable] + list(argv), self._resource_spec, elastic) if elastic
                     else supervise_script(argv, max_restarts, restart_backoff))   # the supervisor ends here
        self._job = Job(self._resource_spec, strategy_builder, context=job, launch_argv=launch_argv,
                        environ=os.environ, trace_dir=trace_dir, logdir=logdir, verbose=verbose, progress=progress,
                        total_steps=total_steps, stall_timeout=stall_timeout, min_nodes=min_nodes,
                        launcher=launcher, accumulation_steps=accumulation_steps, platform=platform)
        self._resource_spec = self._job.resource_spec
        if checkpoint_dir is not None:
            from autodist.checkpoint.resume import SessionCheckpoints
            checkpoints = SessionCheckpoints(os.path.abspath(checkpoint_dir), save_every, self._job.is_chief,
                                             os.environ, lambda text: notice(None, text), self._job.attempt)
            self._job.worker_env.update(checkpoints.worker_env)
            self._job.on_session.append(checkpoints.attach)
            self._job.on_handoff.append(checkpoints.adopt)
            self._job.before_term.append(checkpoints.save_now)

    @property
    def resource_spec(self):
        """The spec of this job's nodes (after a shrinking restart, the nodes left)."""
        return self._resource_spec

    @property
    def strategy_builder(self):
        return self._job.strategy_builder

    @property
    def job(self):
        """This process's ``autodist.runtime.job.Job``: its part in the job (``autodist run`` sets
        ``job.worker_env`` to tell the other nodes whether the chief resumes from a checkpoint)."""
        return self._job

    @property
    def graph_item(self):
        """The GraphItem captured by the current (or last) ``scope()``, or None."""
        return self._graph_item

    @property
    def session(self):
        """The distributed session running now, or None: the one ``create_distributed_session()``
        returned, or the one ``ad.function`` opened last (pass it to ``autodist.checkpoint.Saver``)."""
        return self._job.session

    @property
    def is_chief(self):
        return self._job.is_chief

    @property
    def worker_index(self):
        """This node's task index (its address's rank in sorted order): pick your data shard with it."""
        return self._job.worker_index

    @property
    def num_workers(self):
        """The number of nodes (one process each) in the job."""
        return self._job.num_workers

    @property
    def num_replicas(self):
        """The replicas of the whole job: every node's GPUs, or the CPUs it lists when it has none. The update of a
        synchronous step is the mean of their gradients (scale a loss summed over a replica's rows by it)."""
        return replica_count(self._resource_spec)

    @property
    def batch_scale(self):
        """Replicas now / replicas of the elastic job's first attempt under ``keep_per_replica_batch``, else 1.0:
        multiply your global batch by it to keep each replica's batch as the job grows or shrinks."""
        return batch_scale_of(self._job, os.environ)

    @contextlib.contextmanager
    def scope(self):
        """Capture the default graph, its optimizer and its gradients into a GraphItem.

        Under eager execution (``with ad.scope():`` as ``with strategy.scope():`` in tf.distribute) the
        scope enters this AutoDist's own graph, the same one every time; in graph mode
        (``with tf.Graph().as_default(), ad.scope():``) it captures the default graph.
        """
        with contextlib.ExitStack() as stack:
            if tf.executing_eagerly():
                if self._own_graph is None:
                    self._own_graph = tf.Graph()
                stack.enter_context(self._own_graph.as_default())
            yield from self._capture()

    def _capture(self):
        graph = tf.compat.v1.get_default_graph()
        if self._graph_item is None or self._graph_item.graph is not graph:
            self._graph_item = GraphItem(graph=graph)
        with capture_optimizers(), guard_keras_loops(), on_compile(self._attach_keras), self._graph_item.as_default(), \
                self.input_pipelines(), self.batch_norm():
            try:
                yield self
            except SystemExit as e:   # an error status ends the job at once (Job.chief_exiting)
                self._job.chief_exiting(e.code)
                raise

    def input_pipelines(self):
        """What the scope does to ``tf.data`` iterators made in it (``auto_shard``, ``uneven_inputs``; a no-op when
        both are off), as a context manager: ``autodist run`` applies it to the whole script."""
        uneven, shard = self._inputs
        return capture_datasets(uneven, shard, self.num_workers, self.worker_index, _local_replicas(self))

    def batch_norm(self):
        """What the scope does to Keras' batch normalization (``capture.batch_norm``: synchronized statistics where
        asked or, with ``sync_batch_norm``, everywhere), as a context manager: ``autodist run`` applies it to the
        whole script."""
        return synchronized_batch_norm(every_layer=self._sync_batch_norm)

    def _attach_keras(self, model):
        """A model compiled in the scope gets distributed fit/evaluate/predict (``autodist.runtime.keras.fit``)."""
        from autodist.runtime.keras.fit import attach
        attach(self, self._job, model)

    def create_distributed_session(self):
        """Plan, launch (on the chief), transform and return this node's DistributedSession."""
        if session_requests_intercepted():
            raise SessionRequested(self)
        if self._job.session is not None:
            raise SessionError("create_distributed_session() was already called on this AutoDist; one "
                               "AutoDist runs one job")
        item = self._graph_item
        if item is None:
            raise SessionError("create_distributed_session() needs a graph: build the model inside "
                               "`with ad.scope():` first")
        if self._inputs[0] is not None:   # the training input read ahead: its state variable's record
            attach_uneven_inputs(item, self._inputs[0])
        item.prepare()
        if not item.grad_records:
            raise SessionError("no gradients were captured: create the optimizer and call its "
                               "apply_gradients (or minimize) inside `with ad.scope():`")
        return self._job.open(item)

    def function(self, fn):
        """A distributed version of ``fn`` built on first call (see ``autodist.runtime.session.function``)."""
        from autodist.runtime.session.function import DistributedFunction
        return DistributedFunction(self, fn, self._job)

    def log_scalar(self, tag, value, step=None):
        """Write the scalar ``tag`` (e.g. your loss) to TensorBoard at ``step`` (default: the current
        session step); nothing without ``logdir``."""
        if self._job.scalars is not None:
            self._job.scalars.scalar(tag, value, step)

    def finish_job(self, abort=False, timeout=120.0, reason=None):
        """End the job this chief launched: wait up to ``timeout`` s for the other nodes' scripts
        (``abort``: stop them now, announcing ``reason``), stop every process of the job, remove its
        directories, and raise the first ``RemoteWorkerError``. A no-op on other nodes and when done
        already; without a call it happens at exit (``autodist run`` calls it to choose its exit status)."""
        self._job.finish(abort=abort, timeout=timeout, reason=reason)


def _local_replicas(ad):
    """The number of replicas of this process's node (its GPUs, else its CPUs listed in the spec)."""
    from autodist.spec.rules import task_order
    spec = ad.resource_spec
    address = task_order([n.address for n in spec.node_specs])[ad.worker_index]
    return len(spec.node_gpu_devices.get(address) or spec.node_cpu_devices[address])


def _check_switch(name, value):
    if not isinstance(value, bool):
        raise StrategyError("AutoDist({}={!r}): expected True or False".format(name, value))
    return value


def _check_accumulation_steps(steps):
    if steps is None:
        return
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_ACCUMULATION_STEPS:
        raise StrategyError("AutoDist(accumulation_steps={!r}): expected a whole number of calls from 1 to {} "
                            "(1: synchronize at every call)".format(steps, MAX_ACCUMULATION_STEPS))


def _new_chief(environ):
    """Whether this process would start a new job and is not an attempt of a supervisor already."""
    from autodist.runtime.context import JobContext
    return JobContext.from_env(environ) is None and attempt_of(environ) is None
