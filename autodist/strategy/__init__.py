"""``autodist.strategy``: AutoDist 0.7's import path, no logic of its own (the names of ``autodist.strategies``).

AutoDist code reads ``from autodist.strategy import PS, AllReduce`` and
``from autodist.strategy.base import Strategy, StrategyBuilder`` for custom
builders; both work unchanged. There is one implementation
(``autodist.strategies``); these are its second names.
"""
from autodist.strategies import (BUILDERS, PS, AllReduce, Parallax, PartitionedAR, PartitionedPS, PSLoadBalancing,
                                 RandomAxisPartitionAR, Strategy, StrategyBuilder, StrategyCompiler,
                                 UnevenPartitionedPS, VariableStrategyBuilder)

__all__ = [
    "PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce",
    "PartitionedAR", "RandomAxisPartitionAR", "Parallax", "Strategy", "StrategyBuilder",
    "StrategyCompiler", "VariableStrategyBuilder", "BUILDERS",
]
