"""``autodist.strategy.ps_lb_strategy``: AutoDist 0.7's import path.

A second name of ``autodist.strategies.ps_load_balancing``, no logic of its own.
"""
from autodist.strategies.ps_load_balancing import PSLoadBalancing

__all__ = ["PSLoadBalancing"]
