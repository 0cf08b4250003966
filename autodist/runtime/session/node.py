"""This node's DistributedSession: the graph transformed for this node, on its server, initialized.

    graph_item + compiled strategy + JobContext
        -> GraphTransformer(strategy, this node).transform   (kernel passes)
        -> one import into a fresh tf.Graph
        -> tf.compat.v1.Session on this node's server, the init ops run
        -> DistributedSession (feeds split over replicas, fetches mapped back)

``autodist.runtime.session.distributed`` is the session class; this module makes one for
the node this process runs on, for ``autodist.runtime.job`` (the job's first
session and every reopened one).

The init op is a collective over every replica, so it returns when the whole
job is up; until then a member only waits, bounded by ``init_timeout``
twice: TensorFlow's own ``RunOptions`` timeout ends a step that waits in a
collective, but not the session's creation on the master, which waits without
a limit for every server of the cluster (a stopped or frozen peer); the init
runs on a watched thread that gives up ``INIT_GRACE`` s later, naming the
nodes waited for.
"""
import time

import tensorflow as tf

from autodist.spec.cluster import cpu_count_of, node_config
from autodist.errors import SessionError
from autodist.ir.utils import gc_paused
from autodist.kernel.graph_transformer import GraphTransformer
from autodist.kernel.assignment import NodeContext
from autodist.kernel.walks import resource_source
from autodist.plan.names import INIT_OPS
from autodist.runtime.session.fetch_mapping import FetchMapper
from autodist.runtime.session.micro_steps import MicroSteps
from autodist.runtime.session.distributed import DistributedSession, WatchedCaller, await_failure, close_bounded

__all__ = ["open_node_session", "import_node_graph", "run_init", "INIT_GRACE"]

INIT_GRACE = 5.0   # s past ``init_timeout`` before the watched init gives up on TensorFlow's own timeout


def import_node_graph(item):
    """This node's transformed GraphItem as the ``tf.Graph`` its session runs."""
    graph = tf.Graph()
    with graph.as_default(), gc_paused():   # every object the import makes stays alive (as in the transform)
        tf.compat.v1.import_graph_def(item.graph_def, name="")
    return graph


def open_node_session(graph_item, strategy, context, resource_spec, failure=None, on_interrupt=None,
                      init_timeout=600.0, monitor=None, tracer=None, scalars=None):
    """Transform ``graph_item`` for this node and return an initialized DistributedSession (module docstring).

    ``monitor``, ``tracer`` and ``scalars`` watch its calls (``DistributedSession``).
    """
    node = NodeContext(job_id=context.job_id, task_index=context.task_index, num_tasks=context.num_tasks,
                       chief_task=context.chief_task, collective_key_base=context.collective_key_base)
    result = GraphTransformer(strategy, node).transform(graph_item)
    graph = import_node_graph(result.item)
    spec_node = {n.address: n for n in resource_spec.node_specs}.get(context.address)
    cpus, threads = (cpu_count_of(spec_node), spec_node.threads) if spec_node is not None else (1, 0)
    config = node_config(cpus, context.chief_task, threads or None, num_tasks=context.num_tasks)
    session = tf.compat.v1.Session(context.target, graph=graph, config=config)
    run_init(session, INIT_OPS, context, failure, init_timeout)
    mapper = FetchMapper(graph_item.graph, graph, result.assignment, aliases=_aliases(result),
                         train_ops=graph_item.train_op_names)
    micro = MicroSteps(result.micro_steps, result.accumulation_steps, [r.prefix for r in result.assignment.local])
    dist = DistributedSession(session, mapper, graph_item.graph, failure=failure, on_interrupt=on_interrupt,
                              monitor=monitor, tracer=tracer, scalars=scalars, micro_steps=micro)
    dist.transform_result = result
    return dist


def run_init(session, ops, context, failure, init_timeout):
    """Run ``ops`` (the job's init: they wait for every node) on ``session``, bounded (module docstring).

    Raises the job's failure (``failure()``) when there is one, else
    ``SessionError`` naming the nodes waited for; the session is closed then.
    """
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(init_timeout * 1000))
    deadline = time.monotonic() + init_timeout + INIT_GRACE
    late = SessionError("node {}: the job did not come up within {:.0f} s: waited for the TensorFlow servers and "
                        "distributed sessions of {} (every node must create its distributed session; is one "
                        "stopped, frozen or unreachable?)".format(context.address, init_timeout, ", ".join(
                            a + (" (the chief)" if a == context.chief else "") for a in context.addresses
                            if a != context.address) or "no other node"))

    def watch():
        found = failure() if failure is not None else None
        return found if found is not None or time.monotonic() < deadline else late
    try:
        try:
            with WatchedCaller(watch) as caller:
                caller(lambda: [session.run(op, options=options) for op in ops])
        except BaseException:
            close_bounded(session, troubled=True)
            raise
    except tf.errors.OpError as e:
        remote = await_failure(failure, e) if failure is not None else None
        if remote is not None:
            raise remote from e
        if not isinstance(e, tf.errors.DeadlineExceededError):
            raise
        raise late from e


def _aliases(result):
    """Tensors of the user's graph that stand for something else: after partitioning, and the reads of a
    per-replica statistic (its mean over the job's replicas, ``kernel/synchronization/statistics.py``)."""
    aliases = {}
    for info in result.partitions.values():
        aliases.update(info.aliases)
    if result.on_read:
        graph = result.original.graph
        for op in graph.get_operations():
            if op.type == "ReadVariableOp" and resource_source(op.inputs[0]).name in result.on_read:
                aliases[op.outputs[0].name] = result.on_read[resource_source(op.inputs[0]).name]
    return aliases
