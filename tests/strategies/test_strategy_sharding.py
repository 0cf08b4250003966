"""Partitioning arithmetic of the builders: shard counts and water-filled sizes.

(How a split is written, with even sizes, strings and shard names, is tested
with the contract: tests/plan/test_contract.py.)
"""
import random

import pytest

from autodist.strategies._sharding import shard_count, water_fill


@pytest.mark.parametrize("shape, kwargs, expected", [
    ((1000, 10), {}, 4),                          # 40000 bytes / 10000 -> 4
    ((1000, 10), {"max_shards": 3}, 3),
    ((3, 10000), {}, 3),                          # capped by the split dimension
    ((1, 100000), {}, 1),                         # dim 1: nothing to split
    ((), {}, 1),                                  # scalar
    ((100, 10), {}, 1),                           # 4000 bytes: one shard is enough
    ((1000, 10), {"control_flow": True}, 1),
    ((None, 10), {}, 1),
    (None, {}, 1),
], ids=["by-size", "max-shards", "dim-cap", "dim-1", "scalar", "small", "control-flow",
        "unknown-dim", "unknown-rank"])
def test_shard_count(make_var, shape, kwargs, expected):
    max_shards = kwargs.pop("max_shards", 8)
    v = make_var("v", shape, **kwargs)
    assert shard_count(v, 0, 10000, max_shards) == expected


def test_water_fill_levels_the_loads():
    assert water_fill(10, 10, [0, 40, 100]) == (7, 3, 0)
    assert water_fill(9, 1, [0, 0, 0]) == (3, 3, 3)
    assert water_fill(10, 1, [0, 0, 0]) == (4, 3, 3), "remainders go to the lower index"
    assert water_fill(4, 5, [0, 100]) == (4, 0)


@pytest.mark.parametrize("seed", range(20))
def test_water_fill_invariants(seed):
    rng = random.Random(seed)
    loads = sorted(rng.randrange(0, 5000) for _ in range(rng.randrange(1, 8)))
    dim, row_bytes = rng.randrange(1, 500), rng.randrange(1, 64)
    rows = water_fill(dim, row_bytes, loads)
    assert len(rows) == len(loads) and sum(rows) == dim and min(rows) >= 0
    final = [load + r * row_bytes for load, r in zip(loads, rows)]
    filled = [f for f, r in zip(final, rows) if r]
    # every filled server ends within one row of the others, and no server that got
    # nothing is below the filled level by more than a row
    assert max(filled) - min(filled) <= row_bytes
    for f, r in zip(final, rows):
        if not r:
            assert f >= min(filled) - row_bytes
