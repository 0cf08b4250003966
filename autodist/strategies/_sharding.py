"""Partitioning arithmetic shared by the partitioning builders and the plan report.

Conventions (read by the partitioner kernel; keep them exactly):

- ``Node.partitioner`` is the shard count per axis, ``"4,1"`` for four shards
  along axis 0 of a matrix; exactly one axis has more than one shard.
- ``Node.part_config`` holds one Node per shard, in order, named
  ``"<var op name>/part_<i>:0"``.
- ``Node.shard_sizes`` lists the shards' extents along the split axis. Empty
  means the even split, where the first ``dim % k`` shards get one extra row::

      dim 10, k 4  ->  even_sizes = (3, 3, 2, 2)

Which variables may be split at all is decided here too (:func:`shard_count`),
so that every builder refuses the same things: variables consumed inside
control flow (the kernels cannot rewrite their readers), unknown shapes,
scalars and split dimensions smaller than the shard count.
"""
from dataclasses import dataclass
from typing import Tuple

__all__ = ["Sharding", "even_sizes", "partition_string", "parse_partition_string", "part_name",
           "shard_count", "splittable", "water_fill", "write_sharded_node"]


@dataclass(frozen=True, slots=True)
class Sharding:
    """How one variable is split: along ``axis`` into shards of ``sizes`` rows.

    ``explicit`` says whether ``sizes`` is written to ``Node.shard_sizes``
    (uneven splits must be; an even split is implied by the shard count).
    """

    axis: int
    sizes: Tuple[int, ...]
    explicit: bool = False

    @property
    def count(self):
        return len(self.sizes)


def even_sizes(dim, k):
    """Extents of ``k`` even shards of ``dim`` rows: the first ``dim % k`` get one more."""
    q, r = divmod(dim, k)
    return (q + 1,) * r + (q,) * (k - r)


def partition_string(rank, axis, k):
    """``partition_string(2, 0, 4) == "4,1"``."""
    return ",".join(str(k) if i == axis else "1" for i in range(rank))


def parse_partition_string(text):
    """``"1,3" -> (1, 3)``: the split axis and shard count; ValueError if malformed."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError("malformed partitioner {!r}: expected shard counts per axis, "
                         "e.g. '4,1'".format(text)) from None
    split = [i for i, c in enumerate(counts) if c != 1]
    if len(split) != 1 or counts[split[0]] < 2:
        raise ValueError("partitioner {!r} must split exactly one axis into 2 or more "
                         "shards".format(text))
    return split[0], counts[split[0]]


def part_name(op_name, index):
    """``part_name("emb", 0) == "emb/part_0:0"``: the tensor name of shard ``index``."""
    return "{}/part_{}:0".format(op_name, index)


def write_sharded_node(node, var, targets, sharding, fill, synchronizer):
    """Fill ``node`` for ``var``: ``fill(node.<synchronizer>, target)`` for the
    whole variable (``targets[0]``) and, when ``sharding`` splits it, the
    partitioner, explicit shard sizes and one ``part_config`` entry per shard.
    """
    node.var_name = var.name
    fill(getattr(node, synchronizer), targets[0])
    if sharding is None:
        return
    node.partitioner = partition_string(len(var.shape), sharding.axis, sharding.count)
    if sharding.explicit:
        node.shard_sizes.extend(sharding.sizes)
    for i, target in enumerate(targets):
        part = node.part_config.add()
        part.var_name = part_name(var.op_name, i)
        fill(getattr(part, synchronizer), target)


def splittable(var, shard_bytes):
    """Whether ``var`` may be split into shards of about ``shard_bytes`` at all: larger than
    one shard, outside control flow, of a known shape that is not a scalar's."""
    return (var.byte_size > max(1, int(shard_bytes)) and not var.in_control_flow and var.shape_known
            and bool(var.shape))


def shard_count(var, axis, shard_bytes, max_shards):
    """How many shards ``var`` gets along ``axis`` so that each is about ``shard_bytes``.

    1 (do not split) for variables in control flow, unknown shapes, scalars,
    empty variables and when fewer than two shards would result; never more
    than the split dimension or ``max_shards``.
    """
    if not splittable(var, shard_bytes):
        return 1
    shard_bytes = max(1, int(shard_bytes))
    wanted = -(-var.byte_size // shard_bytes)   # ceil division
    k = min(wanted, var.shape[axis], max_shards)
    return k if k >= 2 else 1


def water_fill(dim, row_bytes, loads):
    """Rows for each server so that ``loads[i] + rows[i] * row_bytes`` come out level.

    ``loads`` must be ascending. Water is poured into the least loaded servers
    first: with the ``j`` lowest servers the common level is
    ``(sum(loads[:j]) + dim * row_bytes) / j``, and ``j`` grows while the level
    would still rise above the next server's load. Fractional rows are rounded
    by largest remainder (ties to the lower index), all in integers, so every
    node computes the same split::

        loads (0, 40, 100), 10 rows of 10 bytes  ->  rows (7, 3, 0)

    Returns a tuple aligned with ``loads``; some entries may be 0.
    """
    total = dim * row_bytes
    used, prefix = len(loads), 0
    for j in range(1, len(loads) + 1):
        prefix += loads[j - 1]
        if j == len(loads) or prefix + total <= j * loads[j]:
            used = j
            break
    numerator = prefix + total                      # the level is numerator / used
    unit = used * row_bytes
    floors, remainders = [], []
    for load in loads[:used]:
        share = numerator - used * load            # used * (level - load), >= 0
        floors.append(share // unit)
        remainders.append(share % unit)
    missing = dim - sum(floors)
    for i in sorted(range(used), key=lambda i: (-remainders[i], i))[:missing]:
        floors[i] += 1
    return tuple(floors) + (0,) * (len(loads) - used)
