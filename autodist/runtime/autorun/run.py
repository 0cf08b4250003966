"""Distribute an unmodified tf.compat.v1 or Keras ``fit`` training script: the machinery of ``autodist run``.

    status = run_script(AutoDist(spec, builder, launch_argv=[...]), "train.py", ["--epochs", "3"])
    asked, status = capture_script(AutoDist(spec, builder), "train.py", [...])   # autodist plan: no job

The script runs in this process as ``__main__`` (``sys.argv = [script] +
args``, its directory first on ``sys.path``, as ``python train.py`` would run
it: ``autodist.runtime.autorun.user_script.run_as_main``). For that run only, and
undone afterwards even when it raises:

    optimizers      construction and ``apply_gradients`` are captured
                    (``autodist.capture.optimizers``) into one GraphItem per graph: the
                    graph that is default when the optimizer is applied
    Session         ``tf.compat.v1.Session(...)`` on a graph with captured
                    training returns this node's distributed session (the
                    chief launches the job at that moment, the other nodes
                    join it); on any other graph, a plain local Session
    MonitoredTrainingSession
                    a ``MonitoredSession`` over the distributed session, with
                    the script's hooks (``chief_only_hooks`` on the chief only)
                    ``checkpoint_dir``: restore-or-initialize from its newest
                    checkpoint, saves by the chief (``autodist.checkpoint.resume``)
    rejected        InteractiveSession, MonitoredSession and
                    SingularMonitoredSession on a training graph, a second
                    session on it, summary directories, saver hooks,
                    ``Saver.save``/``restore`` with the distributed session:
                    each raises an ``autodist.errors`` error naming the fix
    Keras           ``fit``/``evaluate``/``predict`` of the script's compiled (eager)
                    model run on a distributed twin of it
                    (``autodist.runtime.autorun.eager_keras``)
    environment     ``AUTODIST_WORKER_INDEX`` and ``AUTODIST_NUM_WORKERS``,
                    for scripts that shard their own data, ``AUTODIST_NUM_REPLICAS``
                    (the job's replicas: ``AutoDist.num_replicas``); ``AUTODIST_BATCH_SCALE``
                    (an elastic job that keeps the per-replica batch)
    tf.data         iterators made anywhere in the script are sharded / read
                    ahead as inside ``ad.scope()`` (``--auto-shard``, ``--uneven-inputs``)

Running variable initializers through the distributed session is skipped
for global variables: the session initialized them identically on every node
when it was created, and re-running them on one node would reset values the
others train. Local variables (metrics) are initialized as asked.
"""
import contextlib
import os
import sys

import tensorflow as tf

from autodist.runtime.autorun.eager_keras import distribute_eager_keras
from autodist.runtime.elastic import BATCH_SCALE_ENV
from autodist.runtime.notices import notice
from autodist.runtime.autorun.script_session import AutorunSession
from autodist.runtime.autorun.user_script import run_as_main
from autodist.errors import CaptureError, SessionError
from autodist.capture.graph_item import GraphItem, default_graph_item

__all__ = ["run_script", "capture_script", "WORKER_INDEX_ENV", "NUM_WORKERS_ENV", "NUM_REPLICAS_ENV"]

WORKER_INDEX_ENV = "AUTODIST_WORKER_INDEX"
NUM_WORKERS_ENV = "AUTODIST_NUM_WORKERS"
NUM_REPLICAS_ENV = "AUTODIST_NUM_REPLICAS"
_REFUSED_HOOKS = ("CheckpointSaverHook", "SummarySaverHook")
_SCAFFOLD_FIELDS = ("init_op", "init_feed_dict", "init_fn", "ready_op", "ready_for_local_init_op",
                    "local_init_op", "local_init_feed_dict", "summary_op", "saver")


class _ItemPerGraph:
    """Stands in for the default GraphItem: each call goes to the item of the current default graph.

    The capture wrappers record into ``get_default_graph_item()``; a script
    may build its model in the global default graph or in ``with
    tf.Graph().as_default():``, so the item is picked (and made, with the
    graph's first optimizer) at the time of each call.
    """

    def __init__(self):
        self.items = {}

    def current(self):
        graph = tf.compat.v1.get_default_graph()
        if graph not in self.items:
            self.items[graph] = GraphItem(graph=graph)
        return self.items[graph]

    def __getattr__(self, name):
        return getattr(self.current(), name)


class _Launcher:
    """Hands the script's session requests to autodist (see the module docstring)."""

    def __init__(self, autodist, originals):
        self.autodist = autodist
        self.items = _ItemPerGraph()
        self.original = originals
        self.session = None

    def training_item(self, graph):
        item = self.items.items.get(graph)
        return item if item is not None and item.grad_records else None

    def distributed(self, graph, what):
        """This node's distributed session for ``graph`` (created once)."""
        if self.session is not None:
            raise SessionError(
                "{}: the script asks for a second session on its training graph; autodist run gives a "
                "script one distributed session (the job starts with it). Reuse the first session for "
                "evaluation, or build the evaluation in a graph of its own".format(what))
        ad = self.autodist
        with graph.as_default(), ad.scope():
            ad.graph_item.copy_gradient_info_from(self.training_item(graph))
            self.session = AutorunSession(ad.create_distributed_session(), graph, ad.job.checkpoints)
        return self.session

    def make_session(self, target="", graph=None, config=None):
        graph = graph if graph is not None else tf.compat.v1.get_default_graph()
        if self.training_item(graph) is None:
            return self.original["Session"](target, graph=graph, config=config)
        return self.distributed(graph, "tf.compat.v1.Session()")

    def monitored_training_session(self, **kwargs):
        graph = tf.compat.v1.get_default_graph()
        if self.training_item(graph) is None:
            return self.original["MonitoredTrainingSession"](**kwargs)
        _check_monitored_arguments(kwargs, self.autodist.job.checkpoints)
        hooks = list(kwargs.get("hooks") or [])
        if self.autodist.is_chief:
            hooks += list(kwargs.get("chief_only_hooks") or [])
        _check_hooks(hooks)
        if kwargs.get("checkpoint_dir"):
            hooks.insert(0, self.resume_hook(kwargs, hooks))
        creator = _SessionCreator(self, graph)
        return self.original["MonitoredSession"](session_creator=creator, hooks=hooks,
                                                 stop_grace_period_secs=kwargs.get("stop_grace_period_secs", 120))

    def resume_hook(self, kwargs, hooks):
        """Restore-or-initialize and periodic saves for ``checkpoint_dir`` (``autodist.checkpoint.resume``).

        The chief looks for the newest checkpoint before it launches the job and
        tells the other nodes (``RESTORE_ENV``), so all of them join the restore.
        A checkpoint at the last step of the script's ``StopAtStepHook`` ends the
        session before its first step (a restarted or elastic job that reached it).
        """
        from autodist.checkpoint.resume import RESTORE_ENV, ResumeHook, last_step_of, newest_checkpoint
        ad = self.autodist
        if ad.is_chief:
            restore_from = newest_checkpoint(kwargs["checkpoint_dir"])
            ad.job.worker_env[RESTORE_ENV] = "1" if restore_from else "0"
        else:
            restore_from = os.environ.get(RESTORE_ENV) == "1"
        steps, secs = kwargs.get("save_checkpoint_steps"), kwargs.get("save_checkpoint_secs", 600)
        attempt = ad.job.attempt
        hook = ResumeHook(kwargs["checkpoint_dir"], restore_from, ad.is_chief, _distributed_of,
                          lambda text: notice(None, text), save_steps=steps, save_secs=None if steps else secs,
                          heading="attempt {}: ".format(attempt) if attempt else "", last_step=last_step_of(hooks))
        ad.job.before_term.append(hook.save_now)   # SIGTERM: a last checkpoint, then the job stops
        ad.job.on_handoff.append(hook.adopt)       # a platform-started job: the decision comes with the plan
        return hook

    def refuse_on_training_graph(self, name, replacement, graph_arg=None):
        """``name`` unchanged, except on a training graph (``graph_arg``: the position of a ``graph`` argument)."""
        original = self.original[name]

        def guarded(*args, **kwargs):
            graph = kwargs.get("graph")
            if graph is None and graph_arg is not None and len(args) > graph_arg:
                graph = args[graph_arg]
            graph = graph if graph is not None else tf.compat.v1.get_default_graph()
            if self.training_item(graph) is not None:
                raise SessionError("tf.compat.v1.{} is not supported by autodist run on a training graph; "
                                   "use {}".format(name, replacement))
            return original(*args, **kwargs)
        return guarded

    def refuse_saver(self, method):
        original = getattr(self.original["Saver"], method)
        launcher = self

        def guarded(saver, sess, *args, **kwargs):
            if launcher.session is not None and getattr(sess, "graph", None) is launcher.session.graph:
                raise SessionError(
                    "tf.compat.v1.train.Saver.{} on the distributed session is not supported by autodist "
                    "run: the variables are laid out differently across nodes. Use autodist.checkpoint.Saver "
                    "(same interface, single-device layout) in the script".format(method))
            return original(saver, sess, *args, **kwargs)
        return guarded


class _SessionCreator(tf.compat.v1.train.SessionCreator):

    def __init__(self, launcher, graph):
        self._launcher = launcher
        self._graph = graph

    def create_session(self):
        return self._launcher.distributed(self._graph, "MonitoredTrainingSession")


def _distributed_of(session):
    return session.distributed_session


def _check_monitored_arguments(kwargs, checkpoints):
    if kwargs.get("checkpoint_dir") and checkpoints is not None:
        raise SessionError(
            "MonitoredTrainingSession(checkpoint_dir={!r}) under autodist run --checkpoint-dir {}: both would save "
            "and restore the job; keep one (the script's own, or the option's)".format(kwargs["checkpoint_dir"],
                                                                                      checkpoints.dir))
    if kwargs.get("summary_dir"):
        raise SessionError(
            "MonitoredTrainingSession(summary_dir=...) is not supported by autodist run: every node would write "
            "summaries of its own. Remove it")
    scaffold = kwargs.get("scaffold")
    if scaffold is not None:
        custom = [f for f in _SCAFFOLD_FIELDS if getattr(scaffold, f) is not None]
        if custom:
            raise SessionError(
                "MonitoredTrainingSession(scaffold=...) with {} is not supported by autodist run: the "
                "distributed session initializes every variable itself".format(", ".join(custom)))


def _check_hooks(hooks):
    for hook in hooks:
        for cls in type(hook).__mro__:
            if cls.__name__ in _REFUSED_HOOKS and cls.__module__.startswith("tensorflow"):
                raise SessionError(
                    "{} is not supported by autodist run: it would save checkpoints or summaries on every "
                    "node. Hooks that fetch tensors, feed values or stop training are supported".format(
                        type(hook).__name__))


def _patch_points(launcher):
    """(module or class, attribute, replacement) for the duration of the script."""
    v1, train = tf.compat.v1, tf.compat.v1.train
    return [
        (v1, "Session", launcher.make_session),
        (v1, "InteractiveSession", launcher.refuse_on_training_graph(
            "InteractiveSession", "tf.compat.v1.Session()", graph_arg=1)),
        (train, "MonitoredTrainingSession", launcher.monitored_training_session),
        (train, "MonitoredSession", launcher.refuse_on_training_graph(
            "MonitoredSession", "tf.compat.v1.train.MonitoredTrainingSession(hooks=...)")),
        (train, "SingularMonitoredSession", launcher.refuse_on_training_graph(
            "SingularMonitoredSession", "tf.compat.v1.train.MonitoredTrainingSession(hooks=...)")),
        (train.Saver, "save", launcher.refuse_saver("save")),
        (train.Saver, "restore", launcher.refuse_saver("restore")),
    ]


def _originals():
    v1, train = tf.compat.v1, tf.compat.v1.train
    return {"Session": v1.Session, "InteractiveSession": v1.InteractiveSession,
            "MonitoredTrainingSession": train.MonitoredTrainingSession, "MonitoredSession": train.MonitoredSession,
            "SingularMonitoredSession": train.SingularMonitoredSession, "Saver": train.Saver}


@contextlib.contextmanager
def _patched(points):
    saved = []
    try:
        for owner, name, replacement in points:
            saved.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def run_script(autodist, script, args):
    """Run ``script`` with sessions distributed through ``autodist``; its exit status (0 when it returns).

    Raises ``FileNotFoundError`` when ``script`` is not a file, and
    ``CaptureError`` when the script returned without asking for a session
    on a graph whose optimizer was applied: nothing was distributed.
    A script that calls ``sys.exit`` just gets its status returned.
    """
    launcher, status = _run_patched(autodist, script, args)
    if status is not None:
        return status
    if launcher.session is None and autodist.session is None:
        raise CaptureError(
            "{} finished without training through a tf.compat.v1 session or a Keras model.fit: nothing was "
            "distributed. autodist run needs a graph-mode script that applies an optimizer (minimize / "
            "apply_gradients) and runs its train op with tf.compat.v1.Session or MonitoredTrainingSession, or "
            "a script that compiles a Keras model and calls its fit; see docs/running.md and docs/keras.md".format(
                script))
    return 0


def capture_script(autodist, script, args):
    """Run ``script`` as ``run_script`` does until its first distributed session is asked for (``autodist plan``).

    Returns ``(asked, status)``: ``asked`` is the AutoDist whose session the
    script asked for, with the captured graph in its ``graph_item`` (``autodist``
    itself for an unmodified script, the script's own for one that uses the
    API), and None when the script ended first; ``status`` is then its exit
    status, or None when it returned. Nothing is launched and nothing trains.
    """
    from autodist.runtime.autorun.user_script import SessionRequested, intercept_session_requests
    try:
        with intercept_session_requests():
            _, status = _run_patched(autodist, script, args)
    except SessionRequested as request:
        return request.autodist, None
    return None, status


def _run_patched(autodist, script, args):
    """The script run with the patches of the module docstring: ``(launcher, exit status or None)``."""
    from autodist.capture.optimizers import capture_optimizers
    launcher = _Launcher(autodist, _originals())
    variables = {WORKER_INDEX_ENV: str(autodist.worker_index), NUM_WORKERS_ENV: str(autodist.num_workers),
                 NUM_REPLICAS_ENV: str(autodist.num_replicas), BATCH_SCALE_ENV: repr(autodist.batch_scale)}
    status = None
    with _patched(_patch_points(launcher)), capture_optimizers(), default_graph_item(launcher.items), \
            distribute_eager_keras(autodist), autodist.input_pipelines(), autodist.batch_norm():
        try:
            run_as_main(script, args, variables)
        except SystemExit as e:   # the script's own exit (argparse's --help too): its status, no more
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
    return launcher, status
