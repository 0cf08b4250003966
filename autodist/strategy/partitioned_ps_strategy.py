"""``autodist.strategy.partitioned_ps_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.partitioned_ps``, no logic of its own.
"""
from autodist.strategies.partitioned_ps import PartitionedPS

__all__ = ["PartitionedPS"]
