"""``autodist.strategy.base``, AutoDist's module for custom builders: the objects of ``autodist.strategies.base``."""
from autodist.strategies.base import (DEFAULT_STRATEGY_DIR, Strategy, StrategyBuilder, StrategyCompiler,
                                      VariableStrategyBuilder, content_id)

__all__ = ["Strategy", "StrategyBuilder", "StrategyCompiler", "VariableStrategyBuilder", "DEFAULT_STRATEGY_DIR",
           "content_id"]
