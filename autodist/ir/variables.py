"""The planning view of a graph's variables, read from the IR (no TensorFlow).

Strategy builders need, per variable: its shape, dtype and byte size (load
balancing, partitioning), whether its gradient is sparse (PS with sparse
accumulators vs all-reduce) and whether it is used inside control flow (whose
bodies the kernels cannot rewrite). Patterns recognized, walking consumers from
the variable's output tensor:

    sparse:        handle -(Identity)*-> ResourceGather / ResourceGatherNd   (input 0)
                   handle -(Identity | ReadVariableOp)*-> GatherV2 / Gather  (params)
                   ref var -(Identity)*-> GatherV2 / Gather                  (params)
    control flow:  handle -(Identity)*-> While / StatelessWhile / If / StatelessIf /
                   PartitionedCall / StatefulPartitionedCall / Enter / RefEnter

``is_sparse`` means *some* read is sparse (a variable also read densely on the
loss path gets a dense gradient in TF; the IR cannot tell which reads the loss
uses, while a saver's dense read is common and harmless). Everything is one pass
over the consumer index: linear in ops + edges.

``graph_variable_infos`` asks the same of a ``tf.Graph`` in place (duck-typed:
ops' ``type``, ``name``, ``node_def`` and ``outputs[0].consumers()``), walking
only the variables' neighbourhoods: a planner that needs a few hundred
variables of a 200k-op graph does not pay for converting all of it (the IR of
a 10k-variable graph took longer than every builder's plan of it).
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from autodist.ir.converters import read_attr_map
from autodist.ir.dtypes import GenericDType
from autodist.ir.generic import GenericShape
from autodist.ir.utils import consumer_map

__all__ = ["VariableInfo", "variable_infos", "graph_variable_infos", "VARIABLE_OP_TYPES"]

VARIABLE_OP_TYPES = ("VarHandleOp", "VariableV2")
_SPARSE_HANDLE_READS = ("ResourceGather", "ResourceGatherNd")
_SPARSE_VALUE_READS = ("GatherV2", "Gather")
_CONTROL_FLOW = ("While", "StatelessWhile", "If", "StatelessIf", "PartitionedCall",
                 "StatefulPartitionedCall", "Enter", "RefEnter")


@dataclass(frozen=True)
class VariableInfo:
    """One variable as the planner sees it.

    ``shape`` may hold None dims (or be None for unknown rank): then
    ``shape_fully_defined`` is False and ``byte_size`` counts unknown dims as 1
    (a lower bound). ``byte_size`` is 0 for element types of no fixed size
    (string); ``dtype`` is None where numpy has no type (bfloat16, float8).
    """

    name: str
    op_name: str
    shape: Optional[Tuple[Optional[int], ...]]
    dtype: Optional[np.dtype]
    byte_size: int
    is_sparse: bool
    sparse_consumers: Tuple[str, ...]
    in_control_flow: bool
    is_resource: bool
    shape_fully_defined: bool


def variable_infos(ugraph, var_op_names=None):
    """``VariableInfo`` of every variable op (``VarHandleOp``, ``VariableV2``), in topological order.

    ``var_op_names`` restricts (and orders) the result; a name that is not a
    variable op of the graph raises ValueError.
    """
    consumers = consumer_map(ugraph)
    if var_op_names is None:
        var_ops = [op for op in ugraph.ops if op.op_type in VARIABLE_OP_TYPES]
    else:
        var_ops = [_variable_op(ugraph, name) for name in var_op_names]
    return [_info(op, consumers) for op in var_ops]


def graph_variable_infos(graph, var_op_names):
    """``VariableInfo`` of the variable ops ``var_op_names`` (in that order) of a ``tf.Graph``, read in place
    (module docstring); a name that is not a variable op of the graph raises ValueError."""
    view = _GraphView(graph)
    return [_info(_variable_op(view, name), view) for name in var_op_names]


class _OpView:
    """An op of a ``tf.Graph`` as the walk reads it: ``name``, ``op_type`` and, on demand, ``op_attr``."""

    __slots__ = ("name", "op_type", "_op", "_attr")

    def __init__(self, op):
        self.name, self.op_type, self._op, self._attr = op.name, op.type, op, None

    @property
    def op_attr(self):
        if self._attr is None:
            self._attr = read_attr_map(self._op.node_def.attr, self.name)
        return self._attr


class _OpsByName:
    """``ops_info.get(name)`` of a ``tf.Graph``."""

    def __init__(self, graph):
        self._graph = graph

    def get(self, name, default=None):
        try:
            return _OpView(self._graph.get_operation_by_name(name))
        except (KeyError, ValueError):
            return default


class _GraphView:
    """What ``_info`` and ``_walk`` ask of a graph, answered from a ``tf.Graph`` in place: ops by name
    (``ops_info``) and a tensor's data consumers (``get``, as ``consumer_map``'s dict answers)."""

    def __init__(self, graph):
        self._graph = graph
        self.ops_info = _OpsByName(graph)

    def get(self, tensor_name, default=None):
        """``[(consumer op, input index), ...]`` of the tensor ``tensor_name`` ("op:0")."""
        op_name, _, index = tensor_name.rpartition(":")
        tensor = self._graph.get_operation_by_name(op_name).outputs[int(index)]
        found = []
        for consumer in dict.fromkeys(tensor.consumers()):   # an op listed once per input that reads the tensor
            view = _OpView(consumer)
            found += [(view, i) for i, t in enumerate(consumer.inputs) if t is tensor]
        return found or default


def _variable_op(ugraph, name):
    op = ugraph.ops_info.get(name)
    if op is None:
        raise ValueError("variable_infos: no op named {!r} in the graph".format(name))
    if op.op_type not in VARIABLE_OP_TYPES:
        raise ValueError("variable_infos: op {!r} is a {}, not a variable op ({})".format(
            name, op.op_type, ", ".join(VARIABLE_OP_TYPES)))
    return op


def _info(op, consumers):
    dtype = op.op_attr.get("dtype")
    shape = op.op_attr.get("shape")
    if not isinstance(dtype, GenericDType) or not isinstance(shape, GenericShape):
        raise ValueError("variable_infos: variable op {!r} lacks its 'dtype'/'shape' attrs".format(
            op.name))
    is_resource = op.op_type == "VarHandleOp"
    sparse, in_control_flow = _walk(op.name + ":0", is_resource, consumers)
    dims = shape.dims
    elements = int(np.prod([1 if d is None else d for d in dims or ()], dtype=np.int64))
    return VariableInfo(
        name=op.name + ":0", op_name=op.name, shape=dims, dtype=dtype.np_dtype,
        byte_size=elements * (dtype.itemsize or 0), is_sparse=bool(sparse),
        sparse_consumers=tuple(sparse), in_control_flow=in_control_flow,
        is_resource=is_resource, shape_fully_defined=shape.is_fully_defined)


def _walk(tensor_name, is_resource, consumers):
    """Follow Identity / ReadVariableOp chains from the variable; (sparse readers, in control flow)."""
    sparse, in_control_flow = [], False
    # (tensor, holds the variable's value rather than its handle, reached through Identity only)
    frontier, seen = [(tensor_name, not is_resource, True)], {tensor_name}
    while frontier:
        name, is_value, identity_only = frontier.pop()
        for consumer, index in consumers.get(name, ()):
            kind = consumer.op_type
            nxt = None
            if kind == "Identity":
                nxt = (consumer.name + ":0", is_value, identity_only)
            elif kind == "ReadVariableOp" and not is_value:
                nxt = (consumer.name + ":0", True, False)
            elif index == 0 and ((kind in _SPARSE_HANDLE_READS and not is_value)
                                 or (kind in _SPARSE_VALUE_READS and is_value)):
                if consumer.name not in sparse:
                    sparse.append(consumer.name)
            elif kind in _CONTROL_FLOW and identity_only:
                in_control_flow = True
            if nxt is not None and nxt[0] not in seen:
                seen.add(nxt[0])
                frontier.append(nxt)
    return sparse, in_control_flow
