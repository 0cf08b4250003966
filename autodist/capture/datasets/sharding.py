"""Automatic sharding of a node's ``tf.data`` pipeline, with tf.distribute's policies (off by default).

Explicit sharding stays the documented way (``ds.shard(ad.num_workers,
ad.worker_index)``: only the script knows whether its data is split per
node already). ``AutoDist(auto_shard=POLICY)`` shards instead every dataset
an iterator is made of inside the scope, by TensorFlow's own rewrite (the one
``tf.distribute`` applies, ``tf.data.experimental.AutoShardPolicy``), over the
job's nodes (the replicas of a node already draw distinct elements from its
one iterator)::

    "auto"   by files when the pipeline reads files (each node reads its share of
             the files), else by elements; also by elements when there are fewer
             files than nodes
    "file"   by files; a pipeline that reads no files, or fewer files than there
             are nodes, fails when its iterator starts
    "data"   by elements: every node reads the whole input and keeps every
             num_workers-th element, from its worker_index on
    "off"    not sharded (the default)

A job of one node is never sharded.
"""
import warnings

import tensorflow as tf

from autodist.errors import CaptureError

__all__ = ["AUTO_SHARD_POLICIES", "auto_shard_policy", "shard_for_node"]

AUTO_SHARD_POLICIES = ("off", "auto", "file", "data")


def auto_shard_policy(value):
    """``value`` (a name above, any case, or ``tf.data.experimental.AutoShardPolicy``) as a policy name; None: off."""
    if value is None:
        return "off"
    enum = tf.data.experimental.AutoShardPolicy
    if isinstance(value, enum):
        value = value.name
    name = str(value).lower()
    if name not in AUTO_SHARD_POLICIES:
        raise CaptureError("auto_shard must be one of {} (tf.data.experimental.AutoShardPolicy's OFF, AUTO, FILE, "
                           "DATA), got {!r}".format(", ".join(AUTO_SHARD_POLICIES), value))
    return name


def shard_for_node(dataset, policy, num_workers, worker_index):
    """``dataset`` restricted to this node's part under ``policy``; ``dataset`` itself when off or alone."""
    if policy == "off" or num_workers <= 1:
        return dataset
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy,
                                                                policy.upper())
    with warnings.catch_warnings():   # reading a dataset's options in a graph warns that they may be stale; ours are not
        warnings.simplefilter("ignore", UserWarning)
        return _AutoShardDataset(dataset.with_options(options), num_workers, worker_index)
