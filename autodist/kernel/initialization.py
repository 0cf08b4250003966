"""The init ops of a node: identical initial values on every replica of every node.

Initialization is three session runs, in this order (``names.INIT_OPS``):

    servers  (chief only) parameter-server variables and the root replica's own
             copies run their initializers
    sync     the root replica broadcasts its values; every other replica of
             every node receives and assigns them (one collective per dtype)
    local    what the passes added (proxies filled from their servers, compressor
             state), lookup tables, staleness tokens

The root is the chief's first replica (``broadcast``), so mirrored copies
start identical, whatever their initializers. Variables whose initial value every process
computes identically (zeros, constants: most optimizer slots) need no
broadcast; every replica runs its own initializer in the sync step. The
broadcast is also the job's start barrier: it cannot finish before the chief
has initialized the servers' variables (a job with nothing to broadcast
broadcasts one scalar; a job of one replica has neither to do).

Why three runs: TensorFlow gives every process the same step id for a step
with collectives, and one process' end-of-step cleanup on a server aborts
whatever another process still runs there under that id. A step with
collectives therefore only touches this node's own devices; work on other
nodes' servers runs in steps without collectives.
"""
import collections

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from autodist.errors import TransformError
from autodist.kernel.broadcast import broadcast_from_chief, chief_barrier, is_root
from autodist.plan.names import INIT_KEY_OFFSET, INIT_LOCAL, INIT_SERVERS, INIT_SYNC
from autodist.kernel.synchronization import staleness

__all__ = ["build_init_ops"]


def _mirrored(assignment):
    """Mirrored variables to broadcast, by dtype (those not initialized identically everywhere)."""
    by_dtype = collections.defaultdict(list)
    for name in sorted(set(assignment.mirrored_vars) - assignment.analysis.deterministic):
        facts = assignment.analysis.variables[name]
        if not facts.shape.is_fully_defined():
            raise TransformError("has no fully defined shape; mirrored variables need one to be broadcast",
                                 pass_name="finalize", variable=name)
        if facts.dtype == tf.string:
            raise TransformError("is a string variable; only numeric variables can be mirrored",
                                 pass_name="finalize", variable=name)
        by_dtype[facts.dtype.name].append(facts)
    return [by_dtype[k] for k in sorted(by_dtype)]


def _broadcast(scratch, assignment, group, key, replicas):
    """One collective for every mirrored variable of one dtype; returns the ops that finish it."""
    dtype = group[0].dtype

    def handle(replica, i):
        return scratch.tensor(replica.prefix + group[i].name, dtype=tf.resource, shape=[])

    return broadcast_from_chief(
        assignment, replicas, key, dtype, [f.shape for f in group],
        read=lambda replica, i: gen_resource_variable_ops.read_variable_op(handle(replica, i), dtype),
        assign=lambda replica, i, value: gen_resource_variable_ops.assign_variable_op(handle(replica, i), value),
        scope=lambda replica: "AutoDist-Init/{}{}/".format(replica.prefix, dtype.name))


def _initializers(assignment, item):
    """(servers, own, local): the existing initializers each init op runs (see the module docstring)."""
    facts = assignment.analysis.variables
    servers = []
    if assignment.node.is_chief:
        root = assignment.chief_replica
        servers = sorted({facts[v].initializer for v in assignment.ps_state})
        servers += [root.prefix + facts[v].initializer for v in sorted(assignment.mirrored_vars)]
    deterministic = sorted(set(assignment.mirrored_vars) & assignment.analysis.deterministic)
    own = [r.prefix + facts[v].initializer for r in assignment.local for v in deterministic
           if not (assignment.node.is_chief and is_root(assignment, r))]
    tables = _original_tables(item, assignment)
    local = _added_initializers(assignment, item) + [r.prefix + t for r in assignment.local for t in tables]
    return servers, own, local


def build_init_ops(editor, assignment, item):
    """Add this node's three init ops (``INIT_OPS``) to the editor's graph.

    Existing initializers join the init ops as control inputs added to the
    GraphDef after the splice (cheaper than a stand-in op per initializer).
    """
    servers, own, local = _initializers(assignment, item)
    # The root sends; the receiving replicas are alike: build one, clone the others.
    roots = [r for r in assignment.local if is_root(assignment, r)]
    receivers = [r for r in assignment.local if not is_root(assignment, r)]
    built_for = roots + receivers[:1]
    scratch = editor.scratch()
    with scratch.graph.as_default():
        tf.no_op(name=INIT_SERVERS)
        groups = _mirrored(assignment)
        key = assignment.key_base + INIT_KEY_OFFSET
        if assignment.num_replicas == 1:
            synced = []  # one replica in the whole job: nothing to copy, no one to wait for
        elif groups:
            synced = [op for i, group in enumerate(groups)
                      for op in _broadcast(scratch, assignment, group, key + i, built_for)]
        else:
            synced = chief_barrier(assignment, key, built_for,
                                   scope=lambda r: "AutoDist-Init/{}barrier/".format(r.prefix))
        tf.group(*synced, name=INIT_SYNC)
        synced = [op.name for op in synced]
        fill = staleness.prefill(scratch, assignment)
        tf.group(*([fill] if fill is not None else []), name=INIT_LOCAL)
    built = scratch.commit()
    if len(receivers) > 1:
        template = receivers[0]
        editor.clone_for_replicas([n for n in built if template.prefix in n], template, receivers[1:])
        own += [name.replace(template.prefix, r.prefix) for r in receivers[1:] for name in synced
                if template.prefix in name]
    editor.add_control_inputs(INIT_SERVERS, servers)
    editor.add_control_inputs(INIT_SYNC, own)
    editor.add_control_inputs(INIT_LOCAL, local)


def _added_initializers(assignment, item):
    """Initializers of variables the passes created (not in the single-device graph)."""
    known = set()
    for facts in assignment.analysis.variables.values():
        known.add(facts.initializer)
        known.update(r.prefix + facts.initializer for r in assignment.local)
    return [v.initializer_name for v in item.info.variables if v.initializer_name not in known]


def _original_tables(item, assignment):
    prefixes = tuple(r.prefix for r in assignment.local)
    names = set()
    for name in item.info.table_initializers:
        for prefix in prefixes:
            if name.startswith(prefix):
                names.add(name[len(prefix):])
    return sorted(names)
