"""Ops added to a node's distributed graph to read and to restore variables in the original layout.

    read     W            PS:          read(W)                      (on its server)
             b            mirrored:    read(AutoDist-Replica-0/b)   (this node's first replica; a per-replica
                                       statistic: the mean of every replica's copy, ``Piece.mean``)
             E            partitioned: concat(read(E/part_0), read(E/part_1), axis)

    restore  (the chief has the values; every node runs its three restore ops in order)

      servers  chief:   value --split--> assign(PS pieces), assign(chief replica's mirrored copies)
      sync     chief:   broadcast_send(its replica's mirrored copies)
               others:  broadcast_recv --> assign(own replicas' mirrored copies)
      local    every node: refresh local proxies of PS variables

The broadcast carries every mirrored piece (one collective per dtype, values
flattened and concatenated, as initialization does) over the job's collective
group; it starts after the chief's assignments, so when a node's last restore
op returns, every variable it can read holds the restored value. With no
mirrored piece a scalar is broadcast as the barrier alone; a job with one
replica needs no collective. The broadcasts are ``autodist.kernel.broadcast``'s
and the three runs are those of initialization
(``autodist.kernel.initialization``): a step with collectives must not touch
other nodes' servers. Names (replica copies, proxies, collective keys) come
from ``autodist.plan.names``.
"""
import collections

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from autodist.errors import CheckpointError
from autodist.kernel.broadcast import broadcast_from_chief, chief_barrier
from autodist.plan.names import KEY_WINDOW, RESTORE_KEY_OFFSET, RESTORE_KEYS_PER_SLOT, proxy_name

__all__ = ["build_reads", "build_restore", "restore_instance_key"]


def restore_instance_key(assignment, slot, index):
    """Collective instance key of restore op ``slot``'s ``index``-th broadcast: equal on every node."""
    if index >= RESTORE_KEYS_PER_SLOT or RESTORE_KEY_OFFSET + RESTORE_KEYS_PER_SLOT * (slot + 1) > KEY_WINDOW:
        raise CheckpointError("restore op {} (dtype group {}) has no collective key left in the job's window; "
                              "use fewer Savers".format(slot, index))
    return assignment.key_base + RESTORE_KEY_OFFSET + RESTORE_KEYS_PER_SLOT * slot + index


def _handle(graph, name):
    try:
        op = graph.get_operation_by_name(name)
    except KeyError:
        raise CheckpointError("the distributed graph has no variable '{}'".format(name)) from None
    if op.type != "VarHandleOp":
        raise CheckpointError("'{}' is a {} op; only resource variables can be checkpointed".format(name, op.type))
    return op.outputs[0]


def _read(graph, name, dtype):
    handle = _handle(graph, name)
    with tf.device(handle.op.device):
        return gen_resource_variable_ops.read_variable_op(handle, dtype)


def _assign(graph, name, value):
    handle = _handle(graph, name)
    with tf.device(handle.op.device):
        return gen_resource_variable_ops.assign_variable_op(handle, value)


def build_reads(graph, assignment, entries, device):
    """{checkpoint key: the variable's whole value}, concatenations placed on ``device``."""
    values = {}
    for entry in entries:
        parts = [graph.get_tensor_by_name(assignment.local[0].prefix + piece.mean) if piece.mean else
                 _read(graph, piece.root_copy(assignment), entry.spec.dtype) for piece in entry.pieces]
        if len(parts) == 1:
            values[entry.key] = parts[0]
            continue
        with tf.device(device):
            values[entry.key] = tf.concat(parts, entry.axis)
    return values


def _chief_side(graph, assignment, entries, sources):
    """Assign PS pieces and the chief replica's copies; returns the assign ops."""
    assigns = []
    for entry in entries:
        value = sources[entry.key]
        parts = [value] if len(entry.pieces) == 1 else tf.split(value, entry.sizes, axis=entry.axis)
        for piece, part in zip(entry.pieces, parts):
            if piece.shape.is_fully_defined():
                part = tf.reshape(part, piece.shape)
            assigns.append(_assign(graph, piece.root_copy(assignment), part))
    return assigns


def _mirrored_groups(entries):
    """Mirrored pieces grouped by dtype (sorted, identical on every node)."""
    groups = collections.defaultdict(list)
    for entry in entries:
        for piece in entry.pieces:
            if piece.shared:
                continue
            if not piece.shape.is_fully_defined():
                raise CheckpointError("variable '{}' has no fully defined shape; it cannot be restored into "
                                      "replicas".format(piece.name))
            groups[entry.spec.dtype.name].append((piece, entry.spec.dtype))
    return [groups[k] for k in sorted(groups)]


def _broadcast_group(graph, assignment, group, key):
    """One collective for a dtype group; the chief replica sends, every other replica receives and assigns."""
    return broadcast_from_chief(
        assignment, assignment.local, key, group[0][1], [piece.shape for piece, _ in group],
        read=lambda replica, i: _read(graph, replica.prefix + group[i][0].name, group[i][1]),
        assign=lambda replica, i, value: _assign(graph, replica.prefix + group[i][0].name, value))


def _refresh_proxies(graph, assignment, entries):
    """Local proxies of restored parameter-server pieces take the restored value."""
    refreshed = []
    existing = {op.name for op in graph.get_operations() if op.type == "VarHandleOp"}
    for entry in entries:
        for piece in entry.pieces:
            proxy = proxy_name(piece.name)
            if not piece.shared or proxy not in existing:
                continue
            refreshed.append(_assign(graph, proxy, _read(graph, piece.name, entry.spec.dtype)))
    return refreshed


def build_restore(graph, assignment, entries, sources, slot, name):
    """This node's three restore ops, to run in order (see the module docstring).

    ``sources`` ({key: value}) on the chief, None on the other nodes. The
    first op is named ``name``; the others ``name`` + "/sync" and "/local".
    """
    chief = assignment.node.is_chief
    if chief and sources is None:
        raise CheckpointError("the chief's restore op needs the values to restore")
    ready = _chief_side(graph, assignment, entries, sources) if chief else []
    servers = tf.group(*ready, name=name)
    synced = []
    if assignment.num_replicas > 1:
        groups = _mirrored_groups(entries)
        if groups:
            for index, group in enumerate(groups):
                synced += _broadcast_group(graph, assignment, group, restore_instance_key(assignment, slot, index))
        else:
            synced += chief_barrier(assignment, restore_instance_key(assignment, slot, 0), assignment.local)
    sync = tf.group(*synced, name=name + "/sync")
    local = tf.group(*_refresh_proxies(graph, assignment, entries), name=name + "/local")
    return servers, sync, local
