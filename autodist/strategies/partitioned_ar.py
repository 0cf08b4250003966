"""``PartitionedAR`` and ``RandomAxisPartitionAR``: large variables all-reduced in shards.

Presets of :class:`~autodist.strategies.all_reduce.AllReduce` (spec 'AUTO',
no compressor) that split every variable larger than ``shard_bytes`` (4 MiB)
into ``k = min(ceil(bytes / shard_bytes), dim)`` even shards along one axis;
each shard is its own collective and takes the next group slot, so a large
variable's shards can run concurrently instead of as one single-flow message::

    emb [1000, 2048] float32 (8 MiB)  ->  partitioner "2,1", parts emb/part_0:0, emb/part_1:0

``PartitionedAR`` splits axis 0. ``RandomAxisPartitionAR`` picks the axis
pseudo-randomly among the axes of size >= 2, but only axis 0 for sparse
variables (IndexedSlices gradients are row slices). The pick is a hash of
``(seed, variable name)``: deterministic on every node, and a variable keeps
its axis when other variables come and go. ``seed=None`` means seed 0.
"""
import hashlib

from autodist.strategies._arguments import check_seed
from autodist.strategies.all_reduce import AllReduce

__all__ = ["PartitionedAR", "RandomAxisPartitionAR", "DEFAULT_SEED"]

#: The seed ``RandomAxisPartitionAR(seed=None)`` uses: every node must agree on it.
DEFAULT_SEED = 0


class PartitionedAR(AllReduce):
    """All-reduce with variables above ``shard_bytes`` split into even shards along axis 0."""

    def __init__(self, chunk_size=128):
        super().__init__(chunk_size, "AUTO", "NoneCompressor")
        self._args = {"chunk_size": chunk_size}

    def split_axis(self, var):
        return 0


class RandomAxisPartitionAR(PartitionedAR):
    """PartitionedAR splitting dense variables along a seeded pseudo-random axis."""

    def __init__(self, chunk_size=128, seed=None):
        super().__init__(chunk_size)
        self._seed = DEFAULT_SEED if check_seed(type(self).__name__, seed) is None else seed
        self._args = {"chunk_size": chunk_size, "seed": seed}

    def split_axis(self, var):
        if var.is_sparse:
            return 0
        axes = [axis for axis, dim in enumerate(var.shape) if dim >= 2] or [0]
        if len(axes) == 1:
            return axes[0]
        digest = hashlib.sha256("{}/{}".format(self._seed, var.name).encode()).digest()
        return axes[int.from_bytes(digest[:8], "big") % len(axes)]
