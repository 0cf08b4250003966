"""Which ops of a variable's update run once per shard, and which need the whole variable.

The partition pass clones the part of the apply graph that updates a split
variable once per shard. That is right for an update computed element by
element (SGD, Adam, RMSprop, weight decay), not for one that reads the whole
gradient or the whole variable: a norm (``clipnorm``, LAMB's trust ratio), a
"finite" flag (loss scaling), a matrix product (Muon). Such an op must see the
concatenated shards, or every shard would compute its own norm::

    g --> Square --> Sum --> Sqrt --> clip = g * c --> W -= clip
          (per shard)  (whole: reads concat(Square_0, Square_1))   (per shard: g_i * c)

``plan`` classifies the update's ops, in graph order, starting from the
gradient and the variable's state (its handle and its slots' handles):

    sharded   an element-wise op with a sharded input (and the writes and reads
              of the state): cloned per shard; a whole input with the
              variable's full size along the split axis is sliced for it,
              a scalar or broadcast one is read as it is
    whole     any other op with a sharded input (a reduction, a matmul...):
              kept once, its sharded inputs concatenated along the split axis
    (other)   ops with no sharded input are outside the plan: read as they are

For an IndexedSlices gradient (split on axis 0, rows routed to their shard),
row-wise ops (segment sums, gathers and scatters on axis 0) are sharded too.
"""
import dataclasses
from typing import FrozenSet

import tensorflow as tf

from autodist.errors import TransformError

__all__ = ["ShardPlan", "plan", "sharded_outputs", "passed_through", "slice_index", "ELEMENTWISE"]

ELEMENTWISE = frozenset({
    # unary
    "Identity", "Snapshot", "StopGradient", "Neg", "Abs", "Sign", "Sqrt", "Rsqrt", "Square", "Exp", "Expm1", "Log",
    "Log1p", "Reciprocal", "Inv", "Tanh", "Sigmoid", "Relu", "Softplus", "Cast", "IsFinite", "IsNan", "IsInf",
    "LogicalNot", "Floor", "Ceil", "Round", "Rint", "ZerosLike", "OnesLike", "Erf", "Sin", "Cos", "Atan",
    # binary and more, with broadcasting
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Pow",
    "SquaredDifference", "Greater", "GreaterEqual", "Less", "LessEqual", "Equal", "NotEqual", "LogicalAnd",
    "LogicalOr", "Atan2", "MulNoNan", "Xdivy", "Xlogy", "Select", "SelectV2", "ClipByValue", "AddN",
    # the state: reads and writes of the variable and its slots, the fused element-wise updates
    "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "VariableShape", "Shape",
    "IdentityN", "Fill",
})
_FUSED_PREFIX = "ResourceApply"   # ResourceApplyAdam & co. update element by element
_ROW_WISE = frozenset({
    "UnsortedSegmentSum", "SegmentSum", "Unique", "GatherV2", "Gather", "ResourceGather", "ResourceScatterAdd",
    "ResourceScatterSub", "ResourceScatterUpdate", "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterMax",
    "ResourceScatterMin", "StridedSlice", "Reshape", "ExpandDims", "Squeeze", "Size", "Pack", "ConcatV2",
    "BroadcastTo", "DynamicStitch", "Range", "Prod", "StridedSliceGrad", "ResourceSparseApplyAdagrad",
    "ResourceSparseApplyAdagradV2", "ResourceSparseApplyFtrl", "ResourceSparseApplyFtrlV2",
    "ResourceSparseApplyMomentum", "ResourceSparseApplyProximalAdagrad", "ResourceSparseApplyRMSProp",
    "ResourceSparseApplyCenteredRMSProp", "ResourceSparseApplyAdadelta", "ResourceSparseApplyKerasMomentum",
    "ResourceSparseApplyProximalGradientDescent", "ResourceSparseApplyAdagradDA",
})


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    sharded: FrozenSet[tf.Operation]
    whole: FrozenSet[tf.Operation]
    tensors: FrozenSet[tf.Tensor]     # the per-shard tensors: the sources and the sharded ops' outputs


def _is_sharded_type(op, sparse):
    if op.type in ELEMENTWISE or op.type.startswith(_FUSED_PREFIX) and not op.type.startswith("ResourceApplyProximal"):
        return True
    return sparse and op.type in _ROW_WISE


def plan(ops, sources, writes, sparse, var_op):
    """The ShardPlan of ``ops`` (the variable's update, ``analysis.apply_subgraph``) from the ``sources``
    (gradient tensors and state handles); raises TransformError where shards cannot be updated apart."""
    sharded_tensors = set(sources)
    sharded, whole = set(), set()
    for op in sorted(ops, key=lambda o: o._id):
        inputs = [t for t in op.inputs if t in sharded_tensors]
        if not inputs and op not in writes:
            continue
        if op in writes or _is_sharded_type(op, sparse):
            sharded.add(op)
            sharded_tensors.update(sharded_outputs(op, sharded_tensors))
            continue
        if any(t.dtype == tf.resource for t in inputs):
            raise TransformError("op '{}' ({}) takes the state of the split variable as a whole; its update cannot "
                                 "run per shard: use a builder that does not partition it".format(op.name, op.type),
                                 pass_name="partition", variable=var_op, op=op.name)
        if sparse and any(t.dtype.is_integer for t in inputs):
            raise TransformError("op '{}' ({}) needs the row indices of the whole sparse gradient; its update cannot "
                                 "run per shard: use a builder that does not partition it".format(op.name, op.type),
                                 pass_name="partition", variable=var_op, op=op.name)
        whole.add(op)
    return ShardPlan(frozenset(sharded), frozenset(whole), frozenset(sharded_tensors))


def sharded_outputs(op, sharded_tensors):
    """The outputs of sharded ``op`` that are per shard: all, but for an IdentityN only those whose input is."""
    if op.type == "IdentityN":
        return [out for t, out in zip(op.inputs, op.outputs) if t in sharded_tensors]
    return list(op.outputs)


def passed_through(op, index, sharded_tensors):
    """Whether input ``index`` of sharded ``op`` only passes through it (an IdentityN's other variables)."""
    return op.type == "IdentityN" and op.inputs[index] not in sharded_tensors


def slice_index(tensor, axis, rank, dim):
    """Where ``tensor`` (a whole input of a sharded op) meets the split axis when broadcast against the
    variable (rank ``rank``): None when it broadcasts as it is, else its axis to slice; raises ValueError
    when it neither broadcasts nor has the variable's full size there."""
    if tensor.shape.rank is None:
        raise ValueError("has an unknown rank")
    index = axis - (rank - tensor.shape.rank)
    if index < 0:
        return None
    size = tensor.shape.as_list()[index]
    if size == 1:
        return None
    if size != dim:
        raise ValueError("has {} rows along the split axis, not 1 or {}".format(size, dim))
    return index
