"""``autodist.strategy.partitioned_all_reduce_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.partitioned_ar``, no logic of its own.
"""
from autodist.strategies.partitioned_ar import PartitionedAR

__all__ = ["PartitionedAR"]
