"""``autodist.strategy.auto_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.auto``, no logic of its own.
"""
from autodist.strategies.auto import AutoStrategy

__all__ = ["AutoStrategy"]
