"""``autodist.strategy.ps_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.ps``, no logic of its own.
"""
from autodist.strategies.ps import PS

__all__ = ["PS"]
