"""The TensorFlow ops a partitioned variable is rebuilt from (used by ``partitioner``).

For a variable W split along ``axis`` into shards of ``sizes`` rows (the
partition's sizes, ``contract.Partition.sizes``):

    shards      W/part_i (``names.shard_name``), initialized with slice i of W's
                own initial value, so a partitioned job starts from exactly
                the single-device values
    dense read  read(W) -> concat(read(W/part_0), ..., axis)
    gather      gather(W, ids) -> each id goes to its shard (by row offsets),
                gathered there and stitched back in the ids' order
    gradient    dense: split along the axis; IndexedSlices: rows routed to
                their shard with shard-local indices
"""
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from autodist.plan.names import shard_name

__all__ = ["offsets_of", "make_shards", "assemble", "sharded_gather", "split_dense",
           "split_sparse"]


def offsets_of(sizes):
    return [int(x) for x in np.cumsum([0] + list(sizes))[:-1]]


def make_shards(var_op, initial_value, sizes, axis, trainable, dtype):
    """Shard variables ``<var_op>/part_<i>`` initialized from slices of ``initial_value``."""
    pieces = tf.split(initial_value, sizes, axis=axis, name=var_op + "/AutoDist-SplitInit")
    shards = []
    for i, piece in enumerate(pieces):
        name = shard_name(var_op, i)
        shard = resource_variable_ops.ResourceVariable(initial_value=piece, name=name, trainable=trainable,
                                                       dtype=dtype)
        if shard.op.name != name:
            raise ValueError("the graph already has an op named '{}'".format(name))
        shards.append(shard)
    return shards


def _read(shard):
    return resource_variable_ops.read_variable_op(shard.handle, shard.dtype)


def assemble(shards, axis, name):
    """The whole variable's value: its shards read and concatenated."""
    return tf.concat([_read(s) for s in shards], axis=axis, name=name)


def _route(ids, sizes):
    """(shard index, shard-local id) of each id, for row offsets of ``sizes``."""
    ids = tf.cast(ids, tf.int64)
    bounds = tf.constant(np.cumsum(sizes)[:-1], tf.int64)
    shard = tf.reduce_sum(tf.cast(tf.expand_dims(ids, -1) >= bounds, tf.int32), axis=-1)
    local = ids - tf.gather(tf.constant(offsets_of(sizes), tf.int64), shard)
    return shard, local


def sharded_gather(shards, sizes, ids, name):
    """gather(W, ids) for W split on axis 0: each id gathered from its shard, results stitched."""
    with tf.name_scope(name):
        flat = tf.reshape(ids, [-1])
        shard, local = _route(flat, sizes)
        count = len(shards)
        local_parts = tf.dynamic_partition(local, shard, count)
        positions = tf.dynamic_partition(tf.range(tf.size(flat)), shard, count)
        gathered = [resource_variable_ops.resource_gather(s.handle, p, dtype=s.dtype)
                    for s, p in zip(shards, local_parts)]
        stitched = tf.dynamic_stitch(positions, gathered)
        row_shape = tf.shape(gathered[0])[1:]
        return tf.reshape(stitched, tf.concat([tf.shape(ids), row_shape], 0))


def split_dense(grad, sizes, axis, name):
    return tf.split(grad, sizes, axis=axis, name=name)


def split_sparse(values, indices, sizes, row_shape, name):
    """IndexedSlices rows -> per shard (values, shard-local indices, dense shape)."""
    with tf.name_scope(name):
        shard, local = _route(indices, sizes)
        count = len(sizes)
        value_parts = tf.dynamic_partition(values, shard, count)
        index_parts = tf.dynamic_partition(tf.cast(local, indices.dtype), shard, count)
        return [(v, i, tf.constant([size] + list(row_shape), tf.int64))
                for v, i, size in zip(value_parts, index_parts, sizes)]
