"""All-reduce builders: ``AllReduce`` and the engine its partitioning presets use.

Every variable is synchronized by a collective all-reduce among all replicas
(sparse gradients too: the kernels all-gather them). The kernels fuse the
gradients of one group into one collective. Groups are runs of consecutive
variables (or shards), in the variables' order, of at most ``chunk_size``
members; a group also closes once it holds ``bucket_bytes`` or more (as
PyTorch DDP's buckets do, so a small bias rides with the next layer's weights
instead of costing a collective of its own)::

    chunk_size=2:                 a:0 -> 0    b:0 -> 0    c:0 (3 shards) -> 1, 1, 2    d:0 -> 2
    bucket_bytes=8 MiB, sizes     a 2 -> 0    b 5 -> 0    c 3 -> 0    d 9 -> 1    e 1 -> 2   (MiB)

Why bytes: one fused collective of a whole model (mlp: 100 MB) waits for the
last gradient of the backward pass, and TensorFlow's ring moves one huge
tensor at a far higher CPU cost than several medium ones (``benchmarks/
step_time.py``, mlp on two loopback nodes: 543 CPU ms per step with one
100 MB group, 303 / 287 / 271 / 273 with buckets of 4 / 8 / 16 / 32 MiB;
MultiWorkerMirroredStrategy with 25 MiB packs 267). Runs of consecutive
variables are runs of consecutive gradients of backprop too, so a bucket of
the last layers can go on the wire while earlier layers still compute
(Horovod's fusion buffer, PyTorch DDP's 25 MB buckets, MWMS ``bytes_per_pack``).

Presets (``partitioned_ar``) only replace :meth:`AllReduce.split_axis`, the
choice of the axis a large variable is split along.
"""
from autodist.plan.contract import AllReduceEntry, CollectiveSpec, Compressor, Partition, variable_entry
from autodist.strategies._arguments import check_bucket_bytes, check_choice, check_chunk_size
from autodist.strategies._sharding import shard_count, splittable
from autodist.strategies.base import VariableStrategyBuilder

__all__ = ["AllReduce", "ARConfig", "ar_entry", "ALL_REDUCE_SPECS", "COMPRESSORS", "DEFAULT_BUCKET_BYTES"]

#: Names accepted by ``all_reduce_spec``.
ALL_REDUCE_SPECS = tuple(spec.name for spec in CollectiveSpec)
#: Names accepted by ``compressor``.
COMPRESSORS = tuple(compressor.name for compressor in Compressor)
#: Bytes of gradients fused into one collective by default.
DEFAULT_BUCKET_BYTES = 16 << 20


class ARConfig:
    """The all-reduce settings every variable of a strategy shares."""

    __slots__ = ("spec", "compressor", "chunk_size", "bucket_bytes")

    def __init__(self, builder, chunk_size, all_reduce_spec, compressor, bucket_bytes=None):
        self.chunk_size = check_chunk_size(builder, chunk_size)
        self.bucket_bytes = check_bucket_bytes(builder, bucket_bytes)
        self.spec = CollectiveSpec[check_choice(builder, "all_reduce_spec", all_reduce_spec, ALL_REDUCE_SPECS)]
        self.compressor = Compressor[check_choice(builder, "compressor", compressor, COMPRESSORS)]

    def synchronizer(self, group):
        return AllReduceEntry(group=group, compressor=self.compressor, spec=self.spec)


def ar_entry(var, placement, config):
    """``placement = (groups, partition or None)``: one group per shard."""
    groups, partition = placement
    return variable_entry(var.name, var.op_name, [config.synchronizer(g) for g in groups], partition)


class _Buckets:
    """Group numbers for members in order: a new group once ``chunk_size`` members or ``bucket_bytes`` are reached."""

    def __init__(self, chunk_size, bucket_bytes):
        self._chunk, self._limit = chunk_size, bucket_bytes
        self._group, self._count, self._bytes = 0, 0, 0

    def place(self, size):
        full = self._count == self._chunk or (self._limit is not None and self._bytes >= self._limit)
        if full:
            self._group, self._count, self._bytes = self._group + 1, 0, 0
        self._count += 1
        self._bytes += size
        return self._group


def _shard_bytes(var, partition):
    """Byte sizes of ``var``'s shards (its extents along the split axis, in proportion)."""
    dim = var.shape[partition.axis]
    return [var.byte_size * rows // dim for rows in partition.sizes(dim)]


def all_reduce_layout(variables, chunk_size, partition_of, bucket_bytes=None):
    """``(groups, partition)`` per variable; groups are runs of shards in the variables' order."""
    entries, buckets = [], _Buckets(chunk_size, bucket_bytes)
    for var in variables:
        partition = partition_of(var)
        if partition is None:
            entries.append(((buckets.place(var.byte_size),), None))
        else:
            entries.append((tuple(buckets.place(b) for b in _shard_bytes(var, partition)), partition))
    return entries


class AllReduce(VariableStrategyBuilder):
    """Every variable all-reduced; collectives fused in groups of ``chunk_size`` variables and ``bucket_bytes``.

    ``all_reduce_spec`` is 'AUTO', 'NCCL' or 'RING'; ``compressor`` is
    'NoneCompressor', 'HorovodCompressor', 'HorovodCompressorEF' or
    'PowerSGDCompressor'; ``bucket_bytes`` bounds the bytes of one fused
    collective (None: ``chunk_size`` alone decides, as in AutoDist).
    """

    #: Target shard size of the partitioning presets: a message of a few MiB
    #: already saturates one flow, larger ones gain from concurrent collectives.
    shard_bytes = 4 << 20

    def __init__(self, chunk_size=128, all_reduce_spec="NCCL", compressor="NoneCompressor",
                 bucket_bytes=DEFAULT_BUCKET_BYTES):
        self._config = ARConfig(type(self).__name__, chunk_size, all_reduce_spec, compressor, bucket_bytes)
        self._args = {"chunk_size": chunk_size, "all_reduce_spec": all_reduce_spec,
                      "compressor": compressor, "bucket_bytes": bucket_bytes}

    def split_axis(self, var):
        """The axis to split ``var`` (known shape, rank >= 1) along, or None: AllReduce never splits."""
        return None

    def partition(self, var):
        """Even shards of about ``shard_bytes`` along :meth:`split_axis`, or None."""
        if not splittable(var, self.shard_bytes):
            return None
        axis = self.split_axis(var)
        if axis is None:
            return None
        k = shard_count(var, axis, self.shard_bytes, var.shape[axis])
        return None if k == 1 else Partition.of(var.op_name, len(var.shape), axis, k)

    def layout(self, variables, resource_spec):
        return all_reduce_layout(variables, self._config.chunk_size, self.partition, self._config.bucket_bytes)

    def variable_entry(self, var, placement):
        return ar_entry(var, placement, self._config)
