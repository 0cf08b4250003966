"""Strategy builders: how each variable is synchronized, partitioned and placed.

    from autodist.strategies import PSLoadBalancing
    strategy = PSLoadBalancing().build(graph_item, resource_spec)   # pure, deterministic
    compiled = StrategyCompiler(graph_item, resource_spec).compile(strategy)

The eight builders take AutoDist's constructor arguments and are presets of
two engines (``ps.PS`` and ``all_reduce.AllReduce``) plus their composition
(``Parallax``)::

    PS  <-  PSLoadBalancing  <-  PartitionedPS, UnevenPartitionedPS
    AllReduce  <-  PartitionedAR  <-  RandomAxisPartitionAR
    Parallax = AllReduce (dense) + PSLoadBalancing (sparse)
    AutoStrategy = the cheapest of five presets, or a per-variable search's plan when it is
                   5 % cheaper still (30 % when it makes the kernel relay all-reduce through
                   the chief), priced by the cost model (``autodist.strategies.cost``)

Every algorithm reads only what ``inputs`` gives it (``BuilderVariable`` lists
and device names), so ``builder.build_from_variables(variables, resource_spec)``
runs on synthetic lists and this package does not import TensorFlow. Builders
write the Strategy (the plan) through ``autodist.plan.contract``, and
``report`` reads it through the same module into the tables of
``autodist plan``.
"""
from autodist.strategies.all_reduce import AllReduce
from autodist.strategies.auto import AutoStrategy
from autodist.strategies.base import Strategy, StrategyBuilder, VariableStrategyBuilder
from autodist.strategies.compiler import StrategyCompiler
from autodist.strategies.parallax import Parallax
from autodist.strategies.partitioned_ar import PartitionedAR, RandomAxisPartitionAR
from autodist.strategies.partitioned_ps import PartitionedPS, UnevenPartitionedPS
from autodist.strategies.ps import PS
from autodist.strategies.ps_load_balancing import PSLoadBalancing

__all__ = [
    "PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce",
    "PartitionedAR", "RandomAxisPartitionAR", "Parallax", "Strategy", "StrategyBuilder",
    "StrategyCompiler", "VariableStrategyBuilder", "AutoStrategy", "BUILDERS",
]

#: Builder classes by name, as ``autodist plan -s NAME`` accepts them.
BUILDERS = {cls.__name__: cls for cls in (
    PS, PSLoadBalancing, PartitionedPS, UnevenPartitionedPS, AllReduce, PartitionedAR,
    RandomAxisPartitionAR, Parallax, AutoStrategy)}
