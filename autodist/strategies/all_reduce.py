"""All-reduce builders: ``AllReduce`` and the engine its partitioning presets use.

Every variable is synchronized by a collective all-reduce among all replicas
(sparse gradients too: the kernels all-gather them). Collectives are fused in
groups of ``chunk_size``: the variable (or shard) with running index ``i``,
counted in planning order, gets ``group = i // chunk_size``::

    chunk_size=2:   a:0 -> 0    b:0 -> 0    c:0 (3 shards) -> 1, 1, 2    d:0 -> 2

Presets (``partitioned_ar``) only replace :meth:`AllReduce.split_axis`, the
choice of the axis a large variable is split along.
"""
from autodist.proto import synchronizers_pb2
from autodist.strategies._arguments import check_choice, check_chunk_size
from autodist.strategies._sharding import Sharding, even_sizes, shard_count, splittable, write_sharded_node
from autodist.strategies.base import VariableStrategyBuilder

__all__ = ["AllReduce", "ARConfig", "write_ar_node", "ALL_REDUCE_SPECS", "COMPRESSORS"]

_AR = synchronizers_pb2.AllReduceSynchronizer
#: Names accepted by ``all_reduce_spec``.
ALL_REDUCE_SPECS = tuple(_AR.Spec.keys())
#: Names accepted by ``compressor``.
COMPRESSORS = tuple(_AR.Compressor.keys())


class ARConfig:
    """The all-reduce settings every node of a plan shares."""

    __slots__ = ("spec", "compressor", "chunk_size")

    def __init__(self, builder, chunk_size, all_reduce_spec, compressor):
        self.chunk_size = check_chunk_size(builder, chunk_size)
        self.spec = _AR.Spec.Value(check_choice(builder, "all_reduce_spec", all_reduce_spec,
                                                ALL_REDUCE_SPECS))
        self.compressor = _AR.Compressor.Value(check_choice(builder, "compressor", compressor,
                                                            COMPRESSORS))

    def fill(self, synchronizer, group):
        synchronizer.SetInParent()   # all-default settings must still select the oneof
        if self.spec:
            synchronizer.spec = self.spec
        if self.compressor:
            synchronizer.compressor = self.compressor
        if group:
            synchronizer.group = group


def write_ar_node(node, var, entry, config):
    """``entry = (groups, sharding or None)``: one group per shard."""
    groups, sharding = entry
    write_sharded_node(node, var, groups, sharding, config.fill, "AllReduceSynchronizer")


def all_reduce_layout(variables, chunk_size, sharding_of):
    """``(groups, sharding)`` per variable; groups count shards in planning order."""
    entries, counter = [], 0
    for var in variables:
        sharding = sharding_of(var)
        if sharding is None:
            entries.append(((counter // chunk_size,), None))
            counter += 1
        else:
            k = sharding.count
            entries.append((tuple((counter + j) // chunk_size for j in range(k)), sharding))
            counter += k
    return entries


class AllReduce(VariableStrategyBuilder):
    """Every variable all-reduced; collectives fused in groups of ``chunk_size`` variables.

    ``all_reduce_spec`` is 'AUTO', 'NCCL' or 'RING'; ``compressor`` is
    'NoneCompressor', 'HorovodCompressor', 'HorovodCompressorEF' or
    'PowerSGDCompressor'.
    """

    #: Target shard size of the partitioning presets: a message of a few MiB
    #: already saturates one flow, larger ones gain from concurrent collectives.
    shard_bytes = 4 << 20

    def __init__(self, chunk_size=128, all_reduce_spec="NCCL", compressor="NoneCompressor"):
        self._config = ARConfig(type(self).__name__, chunk_size, all_reduce_spec, compressor)
        self._args = {"chunk_size": chunk_size, "all_reduce_spec": all_reduce_spec,
                      "compressor": compressor}

    def split_axis(self, var):
        """The axis to split ``var`` (known shape, rank >= 1) along, or None: AllReduce never splits."""
        return None

    def sharding(self, var):
        """Even shards of about ``shard_bytes`` along :meth:`split_axis`, or None."""
        if not splittable(var, self.shard_bytes):
            return None
        axis = self.split_axis(var)
        if axis is None:
            return None
        k = shard_count(var, axis, self.shard_bytes, var.shape[axis])
        return None if k == 1 else Sharding(axis, even_sizes(var.shape[axis], k))

    def layout(self, variables, resource_spec):
        return all_reduce_layout(variables, self._config.chunk_size, self.sharding)

    def write_node(self, node, var, entry):
        write_ar_node(node, var, entry, self._config)
