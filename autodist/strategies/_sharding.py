"""Partitioning arithmetic of the builders: which variables to split, into how many shards, how large.

How a split is written into the Strategy (partitioner string, shard names,
the even split) is the contract's (``autodist.plan.contract.Partition``);
this module only decides. Which variables may be split at all is decided
here (:func:`shard_count`), so that every builder refuses the same things:
variables consumed inside control flow (the kernels cannot rewrite their
readers), unknown shapes, scalars and split dimensions smaller than the shard
count.
"""
__all__ = ["shard_count", "splittable", "water_fill"]


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
