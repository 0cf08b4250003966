"""All-reduce synchronization: every replica applies the mean gradient to its own copy.

Dense gradients of one strategy ``group`` (same compressor and dtype) are
fused into one collective per replica:

    replica r:  g_a, g_b, g_c --flatten+concat--> flat --all-reduce(mean)--> split --> a', b', c'

and each piece feeds replica r's update of that variable (a small bucket on CPU
replicas is all-gathered and added by every replica instead, ``contract.gathers``:
half the ring's sequential messages). IndexedSlices are
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

from autodist.plan.contract import Compressor
from autodist.plan.names import sync_scope
from autodist.kernel import packing
from autodist.kernel.synchronization import compressor as comp
from autodist.kernel.synchronization import relay, wiring

__all__ = ["synchronize_all_reduce", "gather_keys", "gather_rows"]


def _kind(assignment, var):
    """How a variable is reduced: "sparse" (all-gather), "powersgd" (matrices only) or "dense"."""
    if var.sparse:
        return "sparse"
    matrix = assignment.analysis.variables[var.op_name].shape.rank > 1
    if var.synchronizer.compressor == Compressor.PowerSGDCompressor and matrix:
        return "powersgd"
    return "dense"


def _groups(assignment):
    """Variables fused together: same strategy group, kind, compressor and dtype, in a fixed order."""
    groups = collections.defaultdict(list)
    for var in sorted(assignment.ar_vars, key=lambda v: v.op_name):
        kind = _kind(assignment, var)
        # PowerSGD leaves vectors uncompressed; they join the plain dense groups.
        sync = var.synchronizer
        compressor = sync.compressor if kind == "dense" and sync.compressor != Compressor.PowerSGDCompressor \
            else Compressor.NoneCompressor
        dtype = assignment.analysis.grad_dtype(var.op_name)
        groups[(sync.group, kind, compressor, dtype.name)].append(var)
    return [(key[1], key[2], groups[key]) for key in sorted(groups)]


def synchronize_all_reduce(editor, assignment):
    """Add the collectives; returns (step ops, new variables as (handle op, initializer op) names).

    The step ops write the compressors' state (``compressor.keep_state``: kept when a synchronized
    gradient of the replica's step is not finite)."""
    if not assignment.ar_vars:
        return [], []
    if relay.needs_relay(assignment):
        return relay.relay_all_reduce(editor, assignment, [group for _, _, group in _groups(assignment)])
    collectives = comp.Collectives(assignment)
    template, others = assignment.local[0], assignment.local[1:]
    groups = _groups(assignment)
    packed = {index: _pack(editor, assignment, group, index, template)
              for index, (kind, _, group) in enumerate(groups) if kind == "dense"}
    scratch = editor.scratch()
    reduced, writes, new_vars, unpacks, results = {}, [], [], [], []
    with scratch.graph.as_default():
        for index, (kind, compressor, group) in enumerate(groups):
            if kind == "dense":
                w, v, mean = _dense(scratch, collectives, assignment, group, packed[index][0], unpacks,
                                    _scope(assignment, index, template), template, compressor)
                results.append(mean)   # the group's synchronized gradients, before they are unpacked
            else:
                build = {"sparse": _sparse, "powersgd": _powersgd}[kind]
                w, v = build(scratch, collectives, assignment, group, index, reduced, template, compressor)
            writes.extend(w)
            new_vars.extend(v)
        with tf.device(template.device), tf.name_scope(
                "{}state/{}".format(sync_scope("AutoDist-AllReduce/", assignment.group), template.prefix)):
            results += [scratch.graph.get_tensor_by_name(t) for (prefix, _), parts in sorted(reduced.items())
                        if prefix == template.prefix for c, t in sorted(parts.items()) if c in ("dense", "values")]
            step_names = [op.name for op in comp.keep_state(writes, results)]
    built = scratch.commit() + [name for _, made in packed.values() for name in made]
    built += [name for unpack in unpacks for name in unpack(editor, reduced)]
    # Every replica's part is the template's with its own prefix and device.
    editor.clone_for_replicas(built, template, others)
    for replica in others:
        rename = lambda name: name.replace(template.prefix, replica.prefix)  # noqa: E731
        for (prefix, var_op), components in list(reduced.items()):
            if prefix == template.prefix:
                reduced[(replica.prefix, var_op)] = {c: rename(t) for c, t in components.items()}
        step_names += [rename(name) for name in step_names if template.prefix in name]
        new_vars += [(rename(h), rename(i)) for h, i in new_vars if template.prefix in h]
    for (prefix, var_op), components in reduced.items():
        wiring.reroute_gradient(editor, assignment.analysis, var_op, prefix, components)
    return step_names, new_vars


def _scope(assignment, index, replica):
    return "{}group_{}/{}".format(sync_scope("AutoDist-AllReduce/", assignment.group), index, replica.prefix)


def _pack(editor, assignment, group, index, replica):
    """The group's gradients of ``replica`` flattened into one vector (``packing``): (its name, ops added)."""
    shapes = [assignment.analysis.variables[v.op_name].shape for v in group]
    grads = [replica.prefix + assignment.analysis.grad_tensors[v.op_name]["dense"] for v in group]
    dtype = assignment.analysis.grad_dtype(group[0].op_name)
    return packing.pack(editor, grads, dtype, shapes, _scope(assignment, index, replica), replica.device)


def _grad(scratch, assignment, replica, var_op, component="dense"):
    return scratch.tensor(replica.prefix + assignment.analysis.grad_tensors[var_op][component])


def _dense(scratch, collectives, assignment, group, flat_name, unpacks, scope, replica, compressor):
    """One fused collective for the group, built for ``replica`` (the others are cloned) on its packed
    gradients ``flat_name``; ``unpacks`` gets the function that splits the mean back into the variables'
    shapes once the scratch graph is committed: ``unpack(editor, reduced) -> names of the ops it added``.
    Returns (state writes, new variables, the mean)."""
    key = collectives.key()
    with tf.device(replica.device), tf.name_scope(scope):
        mean, writes, new_vars = comp.reduce_flat(collectives, scratch.tensor(flat_name), compressor, key,
                                                  collectives.hint(replica, group[0].synchronizer.spec), "state")
    shapes = [assignment.analysis.variables[v.op_name].shape for v in group]

    def unpack(editor, reduced):
        pieces, made = packing.unpack(editor, scratch.name_of(mean), mean.dtype, shapes, scope, replica.device)
        for var, piece in zip(group, pieces):
            reduced[(replica.prefix, var.op_name)] = {"dense": piece}
        return made
    unpacks.append(unpack)
    return writes, new_vars, mean


def _powersgd(scratch, collectives, assignment, group, index, reduced, replica, compressor):
    writes, new_vars = [], []
    for var in group:
        keys = (collectives.key(), collectives.key())
        scope = "AutoDist-AllReduce/powersgd/{}/{}".format(var.op_name, replica.prefix)
        with tf.device(replica.device), tf.name_scope(scope):
            grad = _grad(scratch, assignment, replica, var.op_name)
            value, w, v = comp.powersgd(collectives, grad, var.synchronizer.powersgd_rank, keys,
                                        collectives.hint(replica, var.synchronizer.spec), "state")
            reduced[(replica.prefix, var.op_name)] = {"dense": tf.identity(value, name="mean").name}
            writes.extend(w)
            new_vars.extend(v)
    return writes, new_vars


_SIZE_LEVELS = 32  # row counts up to 2**31


def _sparse(scratch, collectives, assignment, group, index, reduced, replica, compressor):
    for var in group:
        keys = gather_keys(collectives)
        parts = assignment.analysis.grad_tensors[var.op_name]
        scope = "AutoDist-AllReduce/sparse/{}/{}".format(var.op_name, replica.prefix)
        with tf.device(replica.device), tf.name_scope(scope):
            values = _grad(scratch, assignment, replica, var.op_name, "values")
            indices = _grad(scratch, assignment, replica, var.op_name, "indices")
            result = gather_rows(collectives, values, indices, keys,
                                  collectives.hint(replica, var.synchronizer.spec))
            if "dense_shape" in parts:
                result["dense_shape"] = tf.identity(_grad(scratch, assignment, replica, var.op_name, "dense_shape"),
                                                    name="dense_shape").name
            reduced[(replica.prefix, var.op_name)] = result
    return [], []


def gather_keys(collectives):
    """The instance keys of one ``gather_rows``: the row counts', then two per padded size."""
    return collectives.key(), collectives.reserve(2 * _SIZE_LEVELS)


def gather_rows(collectives, values, indices, keys, hint):
    """Every replica's (indices, values) rows, concatenated in replica order, values / R: tensor names.

    Three collectives in a row: the row counts, then values and indices padded to the largest
    count's power of two (the count every replica reads from the gathered ones)."""
    rows = tf.shape(values, out_type=tf.int64)[0]
    counts = collectives.all_gather(tf.reshape(rows, [1]), keys[0], hint)
    most = tf.reduce_max(counts)
    # Pad to a power of two (at least one row: collectives crash on empty tensors).
    level = tf.cast(tf.math.ceil(tf.math.log(tf.cast(tf.maximum(most, 1), tf.float64)) / tf.math.log(
        tf.constant(2.0, tf.float64)) - 1e-9), tf.int64)
    stride = tf.bitwise.left_shift(tf.constant(1, tf.int64), level)
    key = tf.cast(keys[1] + 2 * level, tf.int32)
    first = tf.reshape(tf.stack([tf.constant(0, tf.int64), stride - rows]), [1, 2])
    rest = tf.zeros(tf.stack([tf.rank(values) - 1, 2]), tf.int64)
    all_values = collectives.all_gather(tf.pad(values, tf.concat([first, rest], 0)), key, hint)
    all_indices = collectives.all_gather(tf.pad(indices, first), key + 1, hint)
    position = tf.range(tf.shape(all_indices, out_type=tf.int64)[0])
    keep = tf.math.floormod(position, stride) < tf.gather(counts, tf.math.floordiv(position, stride))
    count = tf.cast(collectives.assignment.num_replicas, values.dtype)
    return {"values": tf.identity(tf.boolean_mask(all_values, keep) / count, name="values").name,
            "indices": tf.identity(tf.boolean_mask(all_indices, keep), name="indices").name}
