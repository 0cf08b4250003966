"""``autodist.strategy.parallax_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.parallax``, no logic of its own.
"""
from autodist.strategies.parallax import Parallax

__all__ = ["Parallax"]
