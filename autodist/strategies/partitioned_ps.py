"""``PartitionedPS`` and ``UnevenPartitionedPS``: large variables split over servers.

Presets of :class:`~autodist.strategies.ps_load_balancing.PSLoadBalancing`.
The shard-count rule, for ``m`` servers and a total of ``T`` bytes::

    shard_bytes = max(256 KiB, 0.05 * T / m)
    k = min(ceil(bytes / shard_bytes), dim0, m)       split along axis 0 if k >= 2

Items of at most 5% of the mean load keep greedy placement within λ <= 1.05;
``k <= m`` because two shards of one variable on one server gain nothing.
Variables consumed inside control flow, of unknown shape or scalars are never
split (``_sharding.shard_count``). The shards of a variable go to the ``k``
least loaded servers, largest shard to the least loaded.

Even shards (``PartitionedPS``) follow the implied rule: the first ``dim0 % k``
shards hold one extra row and ``shard_sizes`` stays empty. Uneven shards
(``UnevenPartitionedPS``) are water-filled: rows go to the chosen servers so
that their loads come out level (see ``_sharding.water_fill``), a server that
would get no rows is dropped, and the sizes are written to ``shard_sizes``::

    loads (0, 40, 100) bytes, 10 rows of 10 bytes -> shards of 7 and 3 rows
    on the first two servers; loads become (70, 70, 100)
"""
from autodist.strategies.ps_load_balancing import PSLoadBalancing

__all__ = ["PartitionedPS", "UnevenPartitionedPS"]


class PartitionedPS(PSLoadBalancing):
    """PSLoadBalancing with large variables split into even shards along axis 0."""

    partition = "even"


class UnevenPartitionedPS(PSLoadBalancing):
    """PSLoadBalancing with large variables split into load-levelling shards along axis 0."""

    partition = "uneven"
