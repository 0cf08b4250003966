"""All-reduce synchronization: every replica applies the mean gradient to its own copy.

Dense gradients of one strategy ``group`` (same compressor and dtype) are
fused into one collective per replica:

    replica r:  g_a, g_b, g_c --flatten+concat--> flat --all-reduce(mean)--> split --> a', b', c'

and each piece feeds replica r's update of that variable. IndexedSlices are
all-gathered instead (padded to the group's largest row count, the padding
dropped again), so every replica applies the concatenation of all replicas'
rows, divided by the number of replicas: the same update a single device
applies to the global batch.

A collective instance fixes its shape the first time it runs, so gathers of
a size that changes from step to step pad to the next power of two and use
the instance key of that size: each key always sees one shape, at most 32 keys
per variable, and the padding at most doubles what is sent.
"""
import collections

import tensorflow as tf

from autodist.kernel.synchronization import compressor as comp
from autodist.kernel.synchronization import relay, wiring

__all__ = ["synchronize_all_reduce"]


def _groups(plan):
    groups = collections.defaultdict(list)
    for var in sorted(plan.ar_vars, key=lambda v: v.op_name):
        dtype = plan.analysis.variables[var.op_name].dtype
        powersgd = var.compressor == comp.POWERSGD and plan.analysis.variables[var.op_name].shape.rank > 1
        kind = "sparse" if var.sparse else ("powersgd" if powersgd else "dense")
        groups[(var.group, kind, var.compressor if kind == "dense" else 0, dtype.name)].append(var)
    return [groups[k] for k in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3]))]


def synchronize_all_reduce(editor, plan):
    """Add the collectives; returns (step ops, new variables)."""
    if not plan.ar_vars:
        return [], []
    if relay.needs_relay(plan):
        return relay.relay_all_reduce(editor, plan, _groups(plan))
    collectives = comp.Collectives(plan)
    scratch = editor.scratch()
    reduced, steps, new_vars = {}, [], []
    with scratch.graph.as_default():
        for index, group in enumerate(_groups(plan)):
            kind = "sparse" if group[0].sparse else (
                "powersgd" if group[0].compressor == comp.POWERSGD and
                plan.analysis.variables[group[0].op_name].shape.rank > 1 else "dense")
            build = {"sparse": _sparse, "powersgd": _powersgd, "dense": _dense}[kind]
            s, v = build(scratch, collectives, plan, group, index, reduced)
            steps.extend(s)
            new_vars.extend(v)
        step_names = [op.name for op in steps]
    scratch.commit()
    for (prefix, var_op), components in reduced.items():
        wiring.reroute_gradient(editor, plan.analysis, var_op, prefix, components)
    return step_names, new_vars


def _grad(scratch, plan, replica, var_op, component="dense"):
    return scratch.tensor(replica.prefix + plan.analysis.grad_tensors[var_op][component])


def _dense(scratch, collectives, plan, group, index, reduced):
    key = collectives.key()
    spec = group[0].spec
    shapes = [plan.analysis.variables[v.op_name].shape for v in group]
    sizes = [s.num_elements() for s in shapes]
    steps, new_vars = [], []
    for replica in plan.local:
        scope = "AutoDist-AllReduce/group_{}/{}".format(index, replica.prefix)
        with tf.device(replica.device), tf.name_scope(scope):
            grads = [_grad(scratch, plan, replica, v.op_name) for v in group]
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0, name="flat") if len(grads) > 1 \
                else tf.reshape(grads[0], [-1], name="flat")
            mean, s, v = comp.reduce_flat(collectives, flat, group[0].compressor, key,
                                          collectives.hint(replica, spec), "state")
            steps.extend(s)
            new_vars.extend(v)
            pieces = tf.split(mean, sizes, name="pieces") if len(group) > 1 else [mean]
            for var, piece, shape in zip(group, pieces, shapes):
                value = tf.reshape(piece, shape, name=var.op_name.replace("/", "_"))
                reduced[(replica.prefix, var.op_name)] = {"dense": value.name}
    return steps, new_vars


def _powersgd(scratch, collectives, plan, group, index, reduced):
    steps, new_vars = [], []
    for var in group:
        keys = (collectives.key(), collectives.key())
        for replica in plan.local:
            scope = "AutoDist-AllReduce/powersgd/{}/{}".format(var.op_name, replica.prefix)
            with tf.device(replica.device), tf.name_scope(scope):
                grad = _grad(scratch, plan, replica, var.op_name)
                value, s, v = comp.powersgd(collectives, grad, var.powersgd_rank, keys,
                                            collectives.hint(replica, var.spec), "state")
                reduced[(replica.prefix, var.op_name)] = {"dense": tf.identity(value, name="mean").name}
                steps.extend(s)
                new_vars.extend(v)
    return steps, new_vars


_SIZE_LEVELS = 32  # row counts up to 2**31


def _sparse(scratch, collectives, plan, group, index, reduced):
    for var in group:
        keys = (collectives.key(), collectives.key(), collectives.reserve(2 * _SIZE_LEVELS))
        parts = plan.analysis.grad_tensors[var.op_name]
        for replica in plan.local:
            scope = "AutoDist-AllReduce/sparse/{}/{}".format(var.op_name, replica.prefix)
            hint = collectives.hint(replica, var.spec)
            with tf.device(replica.device), tf.name_scope(scope):
                values = _grad(scratch, plan, replica, var.op_name, "values")
                indices = _grad(scratch, plan, replica, var.op_name, "indices")
                result = _gather_rows(collectives, values, indices, keys, hint)
                if "dense_shape" in parts:
                    result["dense_shape"] = tf.identity(_grad(scratch, plan, replica, var.op_name, "dense_shape"),
                                                        name="dense_shape").name
                reduced[(replica.prefix, var.op_name)] = result
    return [], []


def _gather_rows(collectives, values, indices, keys, hint):
    """Every replica's (indices, values) rows, concatenated in replica order, values / R."""
    rows = tf.shape(values, out_type=tf.int64)[0]
    most = collectives.all_reduce(rows, keys[0], hint, merge="Max", final="Id")
    counts = collectives.all_gather(tf.reshape(rows, [1]), keys[1], hint)
    # Pad to a power of two (at least one row: collectives crash on empty tensors).
    level = tf.cast(tf.math.ceil(tf.math.log(tf.cast(tf.maximum(most, 1), tf.float64)) / tf.math.log(
        tf.constant(2.0, tf.float64)) - 1e-9), tf.int64)
    stride = tf.bitwise.left_shift(tf.constant(1, tf.int64), level)
    key = tf.cast(keys[2] + 2 * level, tf.int32)
    first = tf.reshape(tf.stack([tf.constant(0, tf.int64), stride - rows]), [1, 2])
    rest = tf.zeros(tf.stack([tf.rank(values) - 1, 2]), tf.int64)
    all_values = collectives.all_gather(tf.pad(values, tf.concat([first, rest], 0)), key, hint)
    all_indices = collectives.all_gather(tf.pad(indices, first), key + 1, hint)
    position = tf.range(tf.shape(all_indices, out_type=tf.int64)[0])
    keep = tf.math.floormod(position, stride) < tf.gather(counts, tf.math.floordiv(position, stride))
    count = tf.cast(collectives.plan.num_replicas, values.dtype)
    return {"values": tf.identity(tf.boolean_mask(all_values, keep) / count, name="values").name,
            "indices": tf.identity(tf.boolean_mask(all_indices, keep), name="indices").name}
