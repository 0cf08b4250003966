"""``autodist.strategy.all_reduce_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.all_reduce``, no logic of its own.
"""
from autodist.strategies.all_reduce import AllReduce

__all__ = ["AllReduce"]
