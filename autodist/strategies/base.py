"""StrategyBuilder and the base of builders that read variables.

    strategy = PSLoadBalancing().build(graph_item, resource_spec)   # a Strategy (autodist.plan.strategy)

A builder reads a captured graph and a cluster and returns a plan; it writes
each variable as the contract's typed entry and ``autodist.plan.strategy.assemble``
makes the message. ``Strategy`` (with ``content_id`` and ``DEFAULT_STRATEGY_DIR``)
and ``StrategyCompiler`` are names of this module too, where AutoDist 0.7 users
import them (``autodist.strategy.base``).
"""
import abc

from autodist.plan.strategy import DEFAULT_STRATEGY_DIR, Strategy, assemble, content_id
from autodist.strategies.compiler import StrategyCompiler
from autodist.strategies.inputs import builder_variables, replica_devices

__all__ = ["Strategy", "StrategyBuilder", "StrategyCompiler", "VariableStrategyBuilder", "DEFAULT_STRATEGY_DIR",
           "content_id"]


class StrategyBuilder(abc.ABC):
    """Turns a captured graph and a cluster into a Strategy.

    ``build`` must be pure: it never mutates the GraphItem or the
    ResourceSpec and keeps no state between calls, so every node of a job
    that builds from the same inputs gets the same plan.
    """

    @abc.abstractmethod
    def build(self, graph_item, resource_spec):
        """Return a :class:`Strategy` for ``graph_item`` on ``resource_spec``."""

    def job_calibration(self, resource_spec, measure=None):
        """The cluster measurements (a ``cost.Calibration``) this builder plans with on ``resource_spec``,
        which a job ships from its chief to every node; None for a builder that plans from the graph and
        the spec alone (every preset). ``measure(resource_spec) -> Calibration``: given by a chief about to
        launch a job on ``resource_spec`` (``autodist.runtime.calibrate``), which measures a cluster that
        has no figures yet; a builder never starts a process itself."""
        return None

    def with_calibration(self, calibration):
        """This builder planning with ``calibration`` (the job's, from :meth:`job_calibration` on the
        chief), so that every node that builds gets the chief's plan."""
        return self


class VariableStrategyBuilder(StrategyBuilder):
    """A builder whose algorithm reads only the variables (``inputs.BuilderVariable``) and the spec.

    ``build`` extracts the :class:`~autodist.strategies.inputs.BuilderVariable`
    list and calls :meth:`build_from_variables`, which runs on synthetic lists
    as well. A subclass gives two functions: ``layout`` (the algorithm: one
    placement per variable, in order) and ``variable_entry`` (a placement as
    the contract's ``VariableEntry``, which ``contract.write_entry`` writes).
    Constructor arguments are recorded in ``_args`` for ``repr`` and :attr:`arguments`.
    """

    _args = {}

    @property
    def arguments(self):
        """The constructor's arguments, by name (a copy)."""
        return dict(self._args)

    def build(self, graph_item, resource_spec):
        return self.build_from_variables(builder_variables(graph_item), resource_spec)

    def build_from_variables(self, variables, resource_spec):
        """The Strategy for a list of BuilderVariables (nodes in list order)."""
        variables = list(variables)
        layout = self.layout(variables, resource_spec)
        entry_of = self.variable_entry
        return assemble([entry_of(var, placement) for var, placement in zip(variables, layout)],
                        replica_devices(resource_spec))

    @abc.abstractmethod
    def layout(self, variables, resource_spec):
        """One placement per variable, aligned with ``variables``."""

    @abc.abstractmethod
    def variable_entry(self, var, placement):
        """The ``contract.VariableEntry`` of ``var`` from its placement."""

    def __repr__(self):
        return "{}({})".format(type(self).__name__,
                               ", ".join("{}={!r}".format(k, v) for k, v in self._args.items()))
