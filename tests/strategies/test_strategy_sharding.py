"""Partitioning arithmetic: shard counts, names, strings and water-filled sizes."""
import random

import pytest

from autodist.strategies._sharding import (even_sizes, parse_partition_string, part_name,
                                           partition_string, shard_count, water_fill)


def test_even_sizes_give_the_first_shards_the_extra_rows():
    assert even_sizes(10, 4) == (3, 3, 2, 2)
    assert even_sizes(8, 4) == (2, 2, 2, 2)
    assert even_sizes(3, 3) == (1, 1, 1)


def test_partition_strings_and_part_names():
    assert partition_string(2, 0, 4) == "4,1"
    assert partition_string(3, 1, 2) == "1,2,1"
    assert partition_string(1, 0, 3) == "3"
    assert parse_partition_string("1,2,1") == (1, 2)
    assert parse_partition_string("4") == (0, 4)
    assert part_name("emb", 0) == "emb/part_0:0"
    assert part_name("scope/emb", 3) == "scope/emb/part_3:0"


@pytest.mark.parametrize("text", ["", "a,1", "1,1", "2,2", "0,1"])
def test_malformed_partition_strings(text):
    with pytest.raises(ValueError, match="partitioner"):
        parse_partition_string(text)


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
