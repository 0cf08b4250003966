"""The init op of a node: identical initial values on every replica of every node.

    chief:  ps initializers --> root replica's initializers --> broadcast_send(values)
    others:                                           broadcast_recv --> assign to own copies
    then:   variables the passes added (proxies, compressor state), tables, staleness tokens

The root is the chief's first replica. Its initial values, random or not, are
broadcast to every other replica, one collective per dtype (values flattened
and concatenated), so mirrored copies start identical. The broadcast is also
the job's start barrier: it cannot finish before the chief has initialized the
parameter-server variables, so no node reads one before it exists. A job
without mirrored variables broadcasts one scalar for the barrier alone.
"""
import collections

import tensorflow as tf
from tensorflow.python.ops import collective_ops, gen_resource_variable_ops

from autodist.errors import TransformError
from autodist.kernel.synchronization import staleness

__all__ = ["build_init_op", "INIT_OP"]

INIT_OP = "AutoDist-Init/init"
_KEY_OFFSET = 90000  # init collectives use the top of the job's key window


def _mirrored(plan):
    by_dtype = collections.defaultdict(list)
    for name in sorted(plan.mirrored_vars):
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


def _broadcast(scratch, plan, group, key, root_ready):
    """One collective for every mirrored variable of one dtype; returns the ops that finish it."""
    dtype = group[0].dtype
    sizes = [f.shape.num_elements() for f in group]
    done = []
    for replica in plan.local:
        with tf.device(replica.device), tf.name_scope("AutoDist-Init/{}{}/".format(replica.prefix, dtype.name)):
            if replica.global_index == plan.chief_replica.global_index:
                with tf.control_dependencies(root_ready):
                    reads = [tf.reshape(gen_resource_variable_ops.read_variable_op(
                        scratch.tensor(replica.prefix + f.name, dtype=tf.resource, shape=[]), dtype), [-1])
                        for f in group]
                flat = tf.cast(tf.concat(reads, 0), _wire_dtype(dtype))
                done.append(collective_ops.broadcast_send_v2(
                    flat, group_size=plan.num_replicas, group_key=plan.group_key, instance_key=key).op)
                continue
            flat = collective_ops.broadcast_recv_v2(
                tf.constant([sum(sizes)]), _wire_dtype(dtype), group_size=plan.num_replicas,
                group_key=plan.group_key, instance_key=key)
            pieces = tf.split(tf.cast(flat, dtype), sizes) if len(group) > 1 else [tf.cast(flat, dtype)]
            for facts, piece in zip(group, pieces):
                handle = scratch.tensor(replica.prefix + facts.name, dtype=tf.resource, shape=[])
                done.append(gen_resource_variable_ops.assign_variable_op(handle, tf.reshape(piece, facts.shape)))
    return done


def _barrier(scratch, plan, key, root_ready):
    done = []
    for replica in plan.local:
        with tf.device(replica.device), tf.name_scope("AutoDist-Init/{}barrier/".format(replica.prefix)):
            if replica.global_index == plan.chief_replica.global_index:
                with tf.control_dependencies(root_ready):
                    value = tf.constant([1], tf.int32)
                done.append(collective_ops.broadcast_send_v2(value, plan.num_replicas, plan.group_key, key).op)
            else:
                done.append(collective_ops.broadcast_recv_v2(tf.constant([1]), tf.int32, plan.num_replicas,
                                                            plan.group_key, key).op)
    return done


def build_init_op(editor, plan, item):
    """Add this node's init op (``INIT_OP``) to the editor's graph."""
    scratch = editor.scratch()
    with scratch.graph.as_default():
        root_ready = []
        if plan.node.is_chief:
            ps_inits = sorted({plan.analysis.variables[v].initializer for v in plan.ps_state})
            root = plan.chief_replica
            mirrored_inits = [root.prefix + plan.analysis.variables[v].initializer for v in sorted(plan.mirrored_vars)]
            root_ready = [scratch.control(op) for op in ps_inits + mirrored_inits]
        groups = _mirrored(plan)
        key = plan.key_base + _KEY_OFFSET
        if groups:
            synced = [op for i, group in enumerate(groups) for op in _broadcast(scratch, plan, group, key + i, root_ready)]
        else:
            synced = _barrier(scratch, plan, key, root_ready)
        with tf.control_dependencies(synced):
            after = [scratch.control(name) for name in _added_initializers(plan, item)]
            after += [scratch.control(r.prefix + t) for r in plan.local for t in _original_tables(item, plan)]
            fill = staleness.prefill(scratch, plan)
            if fill is not None:
                after.append(fill)
            tf.group(*(synced + after), name=INIT_OP)
    scratch.commit()


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
