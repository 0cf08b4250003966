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

Sharding needs every node to see the elements (or files) in the same order, as
TensorFlow's own policies assume: a shuffle without a seed gives each node an
order of its own, so the nodes' shards overlap and miss elements. Such a
shuffle where the policy shards after it is refused (``CaptureError`` naming
the op and the fix: a seed, a graph seed, ``list_files(shuffle=False)``)::

    "data"   any unseeded shuffle in the pipeline
    "file"   an unseeded shuffle of the file names (before the files are read)
    "auto"   as "file", and a warning for an unseeded shuffle of the records read: when
             there are fewer files than nodes, "auto" shards by elements after it
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
    check_order(dataset, policy)
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy,
                                                                policy.upper())
    with warnings.catch_warnings():   # reading a dataset's options in a graph warns that they may be stale; ours are not
        warnings.simplefilter("ignore", UserWarning)
        return _AutoShardDataset(dataset.with_options(options), num_workers, worker_index)


#: Dataset ops that read files (or run a function that may: interleave, flat_map): what comes before them in a
#: pipeline is the file list, which a "file" policy shards.
_READERS = ("TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "CSVDataset", "Interleave", "FlatMap")


def check_order(dataset, policy):
    """Refuse (or, for "auto", warn of) an unseeded shuffle where ``policy`` shards after it (module docstring)."""
    before, after = _unseeded_shuffles(dataset._variant_tensor.op)
    found = before + (after if policy == "data" else [])
    if found:
        raise CaptureError("auto_shard={!r}: the input pipeline shuffles without a seed ({}): each node would "
                           "shuffle in an order of its own, and their shards would overlap and miss elements. Give "
                           "the shuffle a seed (ds.shuffle(n, seed=1); list_files(..., shuffle=False) or seed=), or "
                           "set a graph seed (tf.compat.v1.set_random_seed) before building the pipeline".format(
                               policy, ", ".join("op '{}'".format(name) for name in found)))
    if after and policy == "auto":
        warnings.warn("auto_shard='auto': the input pipeline shuffles its records without a seed ({}); that is "
                      "fine while it is sharded by files, but with fewer files than nodes it is sharded by "
                      "elements, and the nodes' shards would overlap: give the shuffle a seed".format(
                          ", ".join("op '{}'".format(name) for name in after)), UserWarning, stacklevel=3)


def _unseeded_shuffles(op):
    """``(names before any reader, names after one)`` of the shuffles without a seed upstream of ``op``."""
    before, after, seen = [], [], set()
    stack = [(op, False)]   # (op, whether a reader is downstream of it: its output is read as file names)
    while stack:
        current, read_later = stack.pop()
        if (current.name, read_later) in seen:
            continue
        seen.add((current.name, read_later))
        if current.type.startswith("Shuffle") and _unseeded(current):
            (before if read_later or not _reads_upstream(current) else after).append(current.name)
        reader = any(r in current.type for r in _READERS)
        stack += [(t.op, read_later or reader) for t in current.inputs]
    return sorted(set(before)), sorted(set(after) - set(before))


def _reads_upstream(op):
    """Whether files are read upstream of ``op`` (its elements are records, not file names)."""
    stack, seen = [t.op for t in op.inputs], set()
    while stack:
        current = stack.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        if any(r in current.type for r in _READERS):
            return True
        stack += [t.op for t in current.inputs]
    return False


def _unseeded(shuffle):
    """A shuffle op whose ``seed`` and ``seed2`` are both the constant 0: a fresh random order in every process."""
    seeds = list(shuffle.inputs)[2:4]
    return len(seeds) == 2 and all(s.op.type == "Const" and tf.make_ndarray(s.op.get_attr("value")) == 0
                                   for s in seeds)
