"""The init ops of a node: identical initial values on every replica of every node.

Initialization is three session runs, in this order (``INIT_OPS``):

    servers  (chief only) parameter-server variables and the root replica's own
             copies run their initializers
    sync     the root replica broadcasts its values; every other replica of
             every node receives and assigns them (one collective per dtype)
    local    what the passes added (proxies filled from their servers, compressor
             state), lookup tables, staleness tokens

The root is the chief's first replica, so mirrored copies start identical,
whatever their initializers. Variables whose initial value every process
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
import contextlib

import tensorflow as tf
from tensorflow.python.ops import collective_ops, gen_resource_variable_ops

from autodist.errors import TransformError
from autodist.kernel.reshaper import Reshaper
from autodist.kernel.synchronization import staleness

__all__ = ["build_init_ops", "broadcast_values", "barrier", "INIT_OPS", "INIT_SERVERS", "INIT_SYNC", "INIT_LOCAL",
           "INIT_KEY_OFFSET"]

INIT_SERVERS = "AutoDist-Init/servers"
INIT_SYNC = "AutoDist-Init/sync"
INIT_LOCAL = "AutoDist-Init/local"
INIT_OPS = (INIT_SERVERS, INIT_SYNC, INIT_LOCAL)
# Collective keys of a job: training from key_base + 1 up, initialization from
# key_base + INIT_KEY_OFFSET, checkpoint restores from key_base + 95000.
INIT_KEY_OFFSET = 90000


def _mirrored(plan):
    """Mirrored variables to broadcast, by dtype (those not initialized identically everywhere)."""
    by_dtype = collections.defaultdict(list)
    for name in sorted(set(plan.mirrored_vars) - plan.analysis.deterministic):
        facts = plan.analysis.variables[name]
        if not facts.shape.is_fully_defined():
            raise TransformError("has no fully defined shape; mirrored variables need one to be broadcast",
                                 pass_name="finalize", variable=name)
        if facts.dtype == tf.string:
            raise TransformError("is a string variable; only numeric variables can be mirrored",
                                 pass_name="finalize", variable=name)
        by_dtype[facts.dtype.name].append(facts)
    return [by_dtype[k] for k in sorted(by_dtype)]


def _wire_dtype(dtype):
    return tf.int32 if dtype == tf.bool else dtype


def _is_root(plan, replica):
    return replica.global_index == plan.chief_replica.global_index


def _scoped(scope, replica):
    return tf.name_scope(scope(replica)) if scope is not None else contextlib.nullcontext()


def broadcast_values(plan, replicas, key, dtype, shapes, read, assign, scope=None):
    """One collective that copies the root replica's values of one dtype to every other replica.

    ``read(replica, i)`` reads value ``i`` on the root, ``assign(replica, i,
    value)`` writes it on a receiver; ``shapes[i]`` is its (fully defined)
    shape; ``scope(replica)``, if given, names the ops. Returns the ops that
    finish the broadcast (the send, or the receivers' assignments). Used by
    initialization and by checkpoint restores.
    """
    sizes = [shape.num_elements() for shape in shapes]
    done = []
    for replica in replicas:
        with tf.device(replica.device), _scoped(scope, replica):
            reshape = Reshaper()
            if _is_root(plan, replica):
                flat = tf.concat([reshape(read(replica, i), [-1]) for i in range(len(shapes))], 0)
                done.append(collective_ops.broadcast_send_v2(
                    tf.cast(flat, _wire_dtype(dtype)), group_size=plan.num_replicas, group_key=plan.group_key,
                    instance_key=key).op)
                continue
            flat = collective_ops.broadcast_recv_v2(
                tf.constant([sum(sizes)]), _wire_dtype(dtype), group_size=plan.num_replicas,
                group_key=plan.group_key, instance_key=key)
            pieces = tf.split(tf.cast(flat, dtype), sizes) if len(shapes) > 1 else [tf.cast(flat, dtype)]
            for i, (piece, shape) in enumerate(zip(pieces, shapes)):
                done.append(assign(replica, i, reshape(piece, shape)))
    return done


def barrier(plan, key, replicas, scope=None):
    """A one-scalar broadcast from the root replica: nobody passes it before the root has started."""
    done = []
    for replica in replicas:
        with tf.device(replica.device), _scoped(scope, replica):
            if _is_root(plan, replica):
                done.append(collective_ops.broadcast_send_v2(tf.constant([1], tf.int32), plan.num_replicas,
                                                             plan.group_key, key).op)
            else:
                done.append(collective_ops.broadcast_recv_v2(tf.constant([1]), tf.int32, plan.num_replicas,
                                                            plan.group_key, key).op)
    return done


def _broadcast(scratch, plan, group, key, replicas):
    """One collective for every mirrored variable of one dtype; returns the ops that finish it."""
    dtype = group[0].dtype

    def handle(replica, i):
        return scratch.tensor(replica.prefix + group[i].name, dtype=tf.resource, shape=[])

    return broadcast_values(
        plan, replicas, key, dtype, [f.shape for f in group],
        read=lambda replica, i: gen_resource_variable_ops.read_variable_op(handle(replica, i), dtype),
        assign=lambda replica, i, value: gen_resource_variable_ops.assign_variable_op(handle(replica, i), value),
        scope=lambda replica: "AutoDist-Init/{}{}/".format(replica.prefix, dtype.name))


def build_init_ops(editor, plan, item):
    """Add this node's three init ops (``INIT_OPS``) to the editor's graph.

    Existing initializers join the init ops as control inputs added to the
    GraphDef after the splice (cheaper than a stand-in op per initializer).
    """
    servers, own = [], []
    if plan.node.is_chief:
        root = plan.chief_replica
        servers = sorted({plan.analysis.variables[v].initializer for v in plan.ps_state})
        servers += [root.prefix + plan.analysis.variables[v].initializer for v in sorted(plan.mirrored_vars)]
    deterministic = sorted(set(plan.mirrored_vars) & plan.analysis.deterministic)
    own = [r.prefix + plan.analysis.variables[v].initializer for r in plan.local for v in deterministic
           if not (plan.node.is_chief and _is_root(plan, r))]
    local = _added_initializers(plan, item) + [r.prefix + t for r in plan.local for t in _original_tables(item, plan)]
    # The root sends; the receiving replicas are alike: build one, clone the others.
    roots = [r for r in plan.local if _is_root(plan, r)]
    receivers = [r for r in plan.local if not _is_root(plan, r)]
    built_for = roots + receivers[:1]
    scratch = editor.scratch()
    with scratch.graph.as_default():
        tf.no_op(name=INIT_SERVERS)
        groups = _mirrored(plan)
        key = plan.key_base + INIT_KEY_OFFSET
        if plan.num_replicas == 1:
            synced = []  # one replica in the whole job: nothing to copy, no one to wait for
        elif groups:
            synced = [op for i, group in enumerate(groups)
                      for op in _broadcast(scratch, plan, group, key + i, built_for)]
        else:
            synced = barrier(plan, key, built_for, scope=lambda r: "AutoDist-Init/{}barrier/".format(r.prefix))
        tf.group(*synced, name=INIT_SYNC)
        synced = [op.name for op in synced]
        fill = staleness.prefill(scratch, plan)
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


def _added_initializers(plan, item):
    """Initializers of variables the passes created (not in the single-device graph)."""
    known = set()
    for facts in plan.analysis.variables.values():
        known.add(facts.initializer)
        known.update(r.prefix + facts.initializer for r in plan.local)
    return [v.initializer_name for v in item.info.variables if v.initializer_name not in known]


def _original_tables(item, plan):
    prefixes = tuple(r.prefix for r in plan.local)
    names = set()
    for name in item.info.table_initializers:
        for prefix in prefixes:
            if name.startswith(prefix):
                names.add(name[len(prefix):])
    return sorted(names)
