"""Collective broadcasts from the chief's first replica, for initialization and checkpoint restores.

Mirrored state must start (and, after a restore, continue) identical on every
replica of every node. The chief's first replica (``Assignment.chief_replica``,
the *root*) holds the values; one collective per dtype copies them to every
other replica of the job::

    root:       read(v_0), read(v_1) --flatten+concat--> broadcast_send
    any other:  broadcast_recv --split+reshape--> assign(v_0), assign(v_1)

Each node builds the ops of its own replicas (``replicas``); all of them use
the same instance key, so the send on the chief meets the receives on every
node. A broadcast is also a barrier: no receiver finishes before the root has
sent, which is what ``chief_barrier`` uses with one scalar.
"""
import contextlib

import tensorflow as tf
from tensorflow.python.ops import collective_ops

from autodist.kernel.reshaper import Reshaper

__all__ = ["broadcast_from_chief", "chief_barrier", "is_root", "wire_dtype"]


def is_root(assignment, replica):
    """Whether ``replica`` is the one every broadcast starts from."""
    return replica.global_index == assignment.chief_replica.global_index


def wire_dtype(dtype):
    """The dtype a broadcast carries values of ``dtype`` in (collectives have no bool kernels)."""
    return tf.int32 if dtype == tf.bool else dtype


def _scoped(scope, replica):
    return tf.name_scope(scope(replica)) if scope is not None else contextlib.nullcontext()


def broadcast_from_chief(assignment, replicas, key, dtype, shapes, read, assign, scope=None):
    """One collective that copies the root replica's values of one dtype to every other replica.

    ``read(replica, i)`` reads value ``i`` on the root, ``assign(replica, i,
    value)`` writes it on a receiver; ``shapes[i]`` is its (fully defined)
    shape; ``scope(replica)``, if given, names the ops. Returns the ops that
    finish the broadcast (the send, or the receivers' assignments).
    """
    sizes = [shape.num_elements() for shape in shapes]
    group = dict(group_size=assignment.num_replicas, group_key=assignment.group_key, instance_key=key)
    done = []
    for replica in replicas:
        with tf.device(replica.device), _scoped(scope, replica):
            reshape = Reshaper()
            if is_root(assignment, replica):
                flat = tf.concat([reshape(read(replica, i), [-1]) for i in range(len(shapes))], 0)
                done.append(collective_ops.broadcast_send_v2(tf.cast(flat, wire_dtype(dtype)), **group).op)
                continue
            flat = collective_ops.broadcast_recv_v2(tf.constant([sum(sizes)]), wire_dtype(dtype), **group)
            pieces = tf.split(tf.cast(flat, dtype), sizes) if len(shapes) > 1 else [tf.cast(flat, dtype)]
            for i, (piece, shape) in enumerate(zip(pieces, shapes)):
                done.append(assign(replica, i, reshape(piece, shape)))
    return done


def chief_barrier(assignment, key, replicas, scope=None):
    """A one-scalar broadcast from the root replica: nobody passes it before the root has started."""
    group = dict(group_size=assignment.num_replicas, group_key=assignment.group_key, instance_key=key)
    done = []
    for replica in replicas:
        with tf.device(replica.device), _scoped(scope, replica):
            if is_root(assignment, replica):
                done.append(collective_ops.broadcast_send_v2(tf.constant([1], tf.int32), **group).op)
            else:
                done.append(collective_ops.broadcast_recv_v2(tf.constant([1]), tf.int32, **group).op)
    return done
