"""What a strategy builder reads: the variables to place, and the devices to place them on.

Builders never walk a ``tf.Graph``. They get a list of :class:`BuilderVariable`
(one per variable that has a gradient record, in the GraphItem's record order)
and a ``ResourceSpec``, so that every algorithm also runs on synthetic lists
(``benchmarks/strategy_builders.py`` times them on 100k variables without
TensorFlow). Two sources are combined, and the split of authority matters:

- the gradient records decide *which* variables a strategy covers and whether a
  gradient is sparse (a ``tf.IndexedSlices`` record is the truth; the IR's
  ``VariableInfo.is_sparse`` only guesses from read patterns);
- the IR's planning view (``autodist.ir.variables.graph_variable_infos``, read
  off the captured ``tf.Graph`` in place) gives shapes, dtypes, byte sizes and
  ``in_control_flow``.

Device helpers live here too, because "which devices replicate" and "which
devices may serve" are the same for every builder family.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from autodist.errors import StrategyError

__all__ = [
    "BuilderVariable", "builder_variables", "BatchStatistics", "batch_statistics", "relays_statistics",
    "replica_devices",
    "first_cpu_server", "all_cpu_servers", "node_of", "is_cpu", "keeps_proxy",
]


@dataclass(frozen=True, slots=True)
class BuilderVariable:
    """One variable as a strategy builder sees it.

    ``shape`` is None for an unknown rank and may hold None dims; then
    ``byte_size`` is a lower bound (unknown dims count as 1) and the variable
    is never partitioned. ``dtype`` is the element type's name ("float32").
    """

    name: str
    op_name: str
    shape: Optional[Tuple[Optional[int], ...]]
    dtype: str
    byte_size: int
    is_sparse: bool
    in_control_flow: bool = False
    grad_dtype: Optional[str] = None   # the dtype its gradient travels in, when narrower (mixed precision)

    @property
    def grad_byte_size(self):
        """Bytes of one dense gradient as it travels (half precision travels half)."""
        if self.grad_dtype is None or self.grad_dtype == self.dtype:
            return self.byte_size
        return self.byte_size * _ITEMSIZE.get(self.grad_dtype, 4) // max(1, _ITEMSIZE.get(self.dtype, 4))

    @property
    def shape_known(self):
        return self.shape is not None and all(d is not None for d in self.shape)


_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def builder_variables(graph_item):
    """``BuilderVariable`` of every variable with a gradient record, in record order.

    A record whose target is not a variable op's output (a handle routed
    through an Identity, say) cannot be distributed: StrategyError names it.
    """
    from autodist.ir.variables import graph_variable_infos

    records = graph_item.grad_records
    op_names = []
    for record in records:
        op_name, _, index = record.target.partition(":")
        if index not in ("", "0"):
            raise StrategyError("gradient target {!r} is output {} of op {!r}; only a variable "
                                "op's first output can be planned".format(record.target, index,
                                                                          op_name))
        op_names.append(op_name)
    graph = graph_item.graph
    try:
        infos = graph_variable_infos(graph, op_names)
    except ValueError as exc:
        raise StrategyError("cannot plan the gradient targets: {}".format(exc)) from None
    from autodist.capture.datasets.uneven import half_wire_dtypes
    half = half_wire_dtypes(graph_item)
    return [_builder_variable(info, record.is_sparse, graph, half.get(op_name))
            for info, record, op_name in zip(infos, records, op_names)]


def _builder_variable(info, is_sparse, graph, grad_dtype=None):
    if info.dtype is not None:
        dtype = info.dtype.name
    else:   # bfloat16, float8...: numpy has no type, TensorFlow still knows the name
        dtype = graph.get_operation_by_name(info.op_name).get_attr("dtype").name
    shape = None if info.shape is None else tuple(info.shape)
    return BuilderVariable(name=info.name, op_name=info.op_name, shape=shape, dtype=dtype,
                           byte_size=int(info.byte_size), is_sparse=bool(is_sparse),
                           in_control_flow=bool(info.in_control_flow),
                           grad_dtype=None if grad_dtype is None else grad_dtype.name)


@dataclass(frozen=True)
class BatchStatistics:
    """The synchronized batch norm of a captured graph (``capture.batch_norm``): how many exchanges a step
    makes, forward and backward, each a sum over every replica on the step's critical path, and their bytes
    (per replica, all exchanges)."""

    exchanges: int = 0
    bytes: int = 0


def batch_statistics(graph_item):
    """The :class:`BatchStatistics` of ``graph_item`` (none without synchronized batch norm)."""
    from autodist.capture.batch_norm import statistics_markers
    markers = statistics_markers(graph_item.graph)
    sizes = [m.inputs[0].shape.num_elements() * m.inputs[0].dtype.size for m in markers
             if m.inputs[0].shape.is_fully_defined()]
    return BatchStatistics(exchanges=len(markers), bytes=sum(sizes))


def relays_statistics(entries, replicas):
    """Whether the kernel relays synchronized batch statistics through the chief: replicas on several nodes
    and a parameter server among the plan's pieces (``kernel/synchronization/statistics.py``)."""
    servers = any(part.synchronizer.kind == "ps" for entry in entries for part in (entry.parts or (entry,)))
    return servers and len({node_of(replica) for replica in replicas}) > 1


def replica_devices(resource_spec):
    """Devices that run one replica each: a node's GPUs, or its CPUs if it has none.

    Node-major, in the spec's node order, so a node's replicas are contiguous.
    """
    gpus = resource_spec.node_gpu_devices
    cpus = resource_spec.node_cpu_devices
    replicas = []
    for node in resource_spec.node_specs:
        replicas.extend(gpus.get(node.address) or cpus[node.address])
    return replicas


def first_cpu_server(resource_spec):
    """``["<first node>:CPU:0"]``: the single parameter server of ``PS``."""
    return ["{}:CPU:0".format(resource_spec.node_specs[0].address)]


def all_cpu_servers(resource_spec):
    """Every CPU device of every node, in spec order: the servers of the balanced builders."""
    return [name for name, _ in resource_spec.cpu_devices]


def node_of(device):
    """``"10.0.0.1:CPU:0" -> "10.0.0.1"`` (names parse from the right, IPv6 has colons)."""
    return device.rsplit(":", 2)[0]


def is_cpu(device):
    """Whether a spec device name (``"10.0.0.1:CPU:0"``) names a CPU."""
    return device.rsplit(":", 2)[1] == "CPU"


def keeps_proxy(first_replica, holder):
    """Whether the node whose first replica is ``first_replica`` keeps a local proxy of a piece held
    on ``holder``: every node but a node of CPU replicas that holds the piece itself (the kernel's
    rule, ``kernel/synchronization/proxy.py``, on compiled device names)."""
    return node_of(first_replica) != node_of(holder) or not is_cpu(first_replica)
