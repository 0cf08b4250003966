"""``autodist.strategy.random_axis_partition_all_reduce_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.partitioned_ar``, no logic of its own.
"""
from autodist.strategies.partitioned_ar import RandomAxisPartitionAR

__all__ = ["RandomAxisPartitionAR"]
