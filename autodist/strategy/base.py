"""``autodist.strategy.base``: AutoDist 0.7's import path, no logic of its own (names of ``strategies.base``)."""
from autodist.strategies.base import (DEFAULT_STRATEGY_DIR, Strategy, StrategyBuilder, StrategyCompiler,
                                      VariableStrategyBuilder, content_id)

__all__ = ["Strategy", "StrategyBuilder", "StrategyCompiler", "VariableStrategyBuilder", "DEFAULT_STRATEGY_DIR",
           "content_id"]
