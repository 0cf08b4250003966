"""StrategyCompiler: a builder's plan, resolved against the graph and the cluster.

Builders speak the resource spec's language (``"10.0.0.2:CPU:0"``); kernels
and TensorFlow need job/task names. Compiling is a Strategy -> Strategy
function that never mutates its input::

    "10.0.0.2:GPU:1"  ->  "/job:worker/task:<k>/device:GPU:1"

where ``k = resource_spec.task_index("10.0.0.2")``, the address's rank in sorted
order, so every node derives the same names (``names.worker_device``). Names
already in ``/job:`` form pass unchanged (compiling twice is compiling once).
Entries for variables that have no gradient update in the GraphItem are
dropped, since there is nothing to synchronize. The result carries the hash of
its own content as id. The nodes are copied as they are, only their devices
replaced (``contract.with_destinations``), so compiling never reformats them;
``autodist.plan.strategy.assemble`` makes the new plan.
"""
from autodist.errors import ResourceSpecError, StrategyError
from autodist.plan.contract import op_name, with_destinations
from autodist.plan.names import worker_device
from autodist.plan.strategy import assemble
from autodist.spec.resource_spec import DeviceSpec

__all__ = ["StrategyCompiler"]


class StrategyCompiler:
    """``StrategyCompiler(graph_item, resource_spec).compile(strategy) -> Strategy``."""

    def __init__(self, graph_item, resource_spec):
        self._graph_item = graph_item
        self._resource_spec = resource_spec

    def compile(self, strategy):
        """A new Strategy: variables without gradients dropped, device names resolved."""
        updated = set(self._graph_item.var_op_name_to_grad_info)
        resolve = _DeviceResolver(self._resource_spec)
        def resolve_variable(device, var_name):
            return resolve(device, "variable {!r}".format(var_name))
        nodes = [with_destinations(node, resolve_variable) for node in strategy.node_config
                 if op_name(node.var_name) in updated]
        replicas = [resolve(replica, "graph_config.replicas") for replica in strategy.graph_config.replicas]
        return assemble(nodes, replicas, strategy.graph_config.accumulation_steps)


class _DeviceResolver:
    """Spec device name -> ``/job:worker/task:<k>/device:<TYPE>:<i>``, memoized."""

    def __init__(self, resource_spec):
        self._spec = resource_spec
        self._devices = {name for name, _ in resource_spec.devices}
        self._memo = {}

    def __call__(self, name, where):
        if name.startswith("/job:"):
            return name
        resolved = self._memo.get(name)
        if resolved is None:
            resolved = self._memo[name] = self._resolve(name, where)
        return resolved

    def _resolve(self, name, where):
        if not name:
            raise StrategyError("{}: empty device name; expected '<address>:<CPU|GPU>:<index>'"
                                .format(where))
        try:
            device = DeviceSpec.from_string(name)
        except ResourceSpecError as exc:
            raise StrategyError("{}: {}".format(where, exc)) from None
        if name not in self._devices:
            raise StrategyError("{}: device {!r} is not in the resource spec {} (devices: {})"
                                .format(where, name, self._spec.path,
                                        ", ".join(sorted(self._devices))))
        task = self._spec.task_index(device.host_address)
        return worker_device(task, device.device_type, device.device_index)
