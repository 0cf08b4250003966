"""Running checkpoint ops on a distributed session, and moving state in and out of it.

Checkpoint ops are added to ``session.distributed_graph`` (the session extends
its graph on the next run) and run on the TensorFlow session the
``DistributedSession`` wraps: they name ops of this node's graph, which the
user-facing ``run`` (speaking the single-device graph) cannot fetch.

``read_state`` and ``load_state`` move every variable's value, in the
original layout, out of one session and into another (``autodist.runtime.session.function``
does so when it opens a session for a grown graph); ``Saver`` uses the same
ops with a checkpoint file as the source.
"""
import weakref

import tensorflow as tf
from tensorflow.python.client import session as tf_session

from autodist.checkpoint.graph_ops import build_reads, build_restore
from autodist.checkpoint.layout import layout
from autodist.errors import CheckpointError
from autodist.plan.names import host_cpu

__all__ = ["is_distributed", "raw_run", "run_restore", "RawSession", "host_device", "session_cache", "read_state",
           "load_state", "TRANSFER_SLOT"]

#: Restore-op slot of state transfers; Savers use 1, 2, ... in construction order.
TRANSFER_SLOT = 0
_caches = weakref.WeakKeyDictionary()


def is_distributed(session):
    return hasattr(session, "transform_result") and hasattr(session, "distributed_graph")


def raw_run(session, fetches, feed_dict=None):
    """Run elements of ``session.distributed_graph`` on the session's own TensorFlow session.

    Uses the DistributedSession's wrapped session and its failure watcher
    (``_session``, ``_call``): the public ``run`` only speaks the user's graph.
    """
    inner = session._session
    run = lambda: inner.run(fetches, feed_dict)  # noqa: E731
    call = getattr(session, "_call", None)
    return call(run, trains=False) if call is not None else run()   # a checkpoint's reads are not a training step


class RawSession(tf_session.SessionInterface):
    """A distributed session seen as a plain session of its distributed graph (for tf1 Saver bookkeeping)."""

    def __init__(self, session):
        self._dist = session

    @property
    def graph(self):
        return self._dist.distributed_graph

    @property
    def sess_str(self):
        return self._dist.sess_str

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        return raw_run(self._dist, fetches, feed_dict)

    def partial_run_setup(self, fetches, feeds=None):
        raise CheckpointError("partial runs are not supported")

    def partial_run(self, handle, fetches, feed_dict=None):
        raise CheckpointError("partial runs are not supported")


def host_device(assignment):
    """This node's CPU: where checkpoint files are read and written."""
    return host_cpu(assignment.node.task_index)


def session_cache(session):
    """A dict living as long as ``session``, for ops built into its graph."""
    return _caches.setdefault(session, {})


def read_state(session, specs):
    """{key: numpy value} of ``specs`` (``VariableSpec`` by key) as this node sees them."""
    cache = session_cache(session)
    keys = tuple(sorted(specs))
    reads = cache.get(("reads", keys))
    if reads is None:
        assignment = session.transform_result.assignment
        graph = session.distributed_graph
        with graph.as_default(), graph.name_scope("AutoDist-Checkpoint/state/"):
            values = build_reads(graph, assignment, layout(session.transform_result, specs), host_device(assignment))
        reads = cache[("reads", keys)] = [values[k] for k in keys]
    return dict(zip(keys, raw_run(session, reads)))


def load_state(session, specs, values, slot=TRANSFER_SLOT):
    """Give every copy of ``specs``' variables the chief's ``values`` (ignored on other nodes).

    Every node of the job must call this at the same point: the chief's
    values reach the other replicas by broadcast.
    """
    assignment = session.transform_result.assignment
    cache = session_cache(session)
    keys = tuple(sorted(specs))
    built = cache.get(("load", slot))
    if built is not None and built[0] != keys:
        raise CheckpointError("restore slot {} was built for other variables".format(slot))
    if built is None:
        graph = session.distributed_graph
        with graph.as_default(), graph.name_scope("AutoDist-Checkpoint/load_{}/".format(slot)):
            sources = None
            if assignment.node.is_chief:
                with tf.device(host_device(assignment)):
                    sources = {k: tf.compat.v1.placeholder(specs[k].dtype, specs[k].shape, name="value")
                               for k in keys}
            ops = build_restore(graph, assignment, layout(session.transform_result, specs), sources, slot, "load")
        built = cache[("load", slot)] = (keys, ops, sources)
    _, ops, sources = built
    feeds = {sources[k]: values[k] for k in keys} if sources is not None else None
    run_restore(session, ops, feeds)


def run_restore(session, ops, feeds=None):
    """Run ``build_restore``'s ops in order (the feeds only reach the first)."""
    servers, sync, local = ops
    raw_run(session, servers, feeds)
    raw_run(session, sync)
    raw_run(session, local)
