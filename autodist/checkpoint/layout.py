"""Where each variable of the single-device graph lives in a node's distributed graph.

A checkpoint is written in the *original layout*: one entry per variable of
the single-device graph, under its op name, with its full shape. In the
distributed graph the same state may be held three ways:

    parameter server   one copy, on its server, under the original name   W
    mirrored           one copy per local replica                         AutoDist-Replica-<i>/W
    partitioned        shards (each itself PS or mirrored), along an axis W/part_0, W/part_1, ...

A mirrored statistic kept per replica (batch norm's moving statistics without
synchronization) is saved as its mean over every replica of the job
(``Piece.mean``, built by ``kernel/synchronization/statistics.py``).

``layout(result, specs)`` turns a ``TransformResult`` and the variables to
checkpoint into ``Entry`` records, one per variable, each with the ``Piece``
(s) that hold it in order along ``axis``. Optimizer slots of a partitioned
variable are split like the variable (``PartitionInfo.slots``).
"""
import dataclasses
from typing import Tuple

import tensorflow as tf

from autodist.errors import CheckpointError

__all__ = ["VariableSpec", "Piece", "Entry", "layout", "variables_of", "specs_of", "original_names"]


@dataclasses.dataclass(frozen=True)
class VariableSpec:
    """A variable of the single-device graph, as a checkpoint sees it."""

    key: str          # the name in the checkpoint (the variable's op name, as tf.compat.v1.train.Saver uses)
    op_name: str      # the variable's op in the single-device graph
    dtype: tf.DType
    shape: tf.TensorShape


@dataclasses.dataclass(frozen=True)
class Piece:
    """One variable op of the partitioned graph holding (part of) an original variable."""

    name: str
    shape: tf.TensorShape
    shared: bool      # kept once (parameter-server state); otherwise mirrored per replica
    mean: str = ""    # a per-replica statistic: the tensor (in each replica) of its mean over the job's copies

    def copies(self, assignment):
        """Op names of this piece's copies in this node's graph."""
        if self.shared:
            return [self.name]
        return [replica.prefix + self.name for replica in assignment.local]

    def root_copy(self, assignment):
        """The copy that holds the value to save: the variable itself, or this node's first replica's."""
        return self.name if self.shared else assignment.local[0].prefix + self.name


@dataclasses.dataclass(frozen=True)
class Entry:
    spec: VariableSpec
    axis: int
    pieces: Tuple[Piece, ...]

    @property
    def key(self):
        return self.spec.key

    @property
    def sizes(self):
        return [p.shape[self.axis] for p in self.pieces] if len(self.pieces) > 1 else None


def variables_of(var_list, graph):
    """{checkpoint key: tf.Variable} for a Saver's ``var_list`` (None: every global variable of ``graph``).

    Keys are the variables' op names unless ``var_list`` is a dict, as with
    ``tf.compat.v1.train.Saver``; Keras 3 variables stand for the tf.Variable they wrap.
    """
    from autodist.capture.queries import tf_variable
    if var_list is None:
        var_list = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    items = list(var_list.items()) if isinstance(var_list, dict) else [(None, v) for v in var_list]
    variables = {}
    for key, var in items:
        try:
            var = tf_variable(var)
        except TypeError as e:
            raise CheckpointError("var_list entry {!r} is not a variable: {}".format(key or var, e)) from None
        if var.graph is not graph:
            raise CheckpointError("variable '{}' belongs to another graph than the Saver's; create the Saver "
                                  "inside the AutoDist scope, after building the model".format(var.name))
        key = key if key is not None else var.op.name
        if key in variables:
            raise CheckpointError("two variables would be saved under the name '{}'".format(key))
        variables[key] = var
    return variables


def specs_of(variables):
    """``VariableSpec`` per key of ``variables`` ({key: tf.Variable})."""
    return {key: VariableSpec(key=key, op_name=var.op.name, dtype=var.dtype.base_dtype, shape=var.shape)
            for key, var in variables.items()}


def _split_map(partitions):
    """Original op name (variable or slot) -> (shard op names, axis)."""
    split = {}
    for info in partitions.values():
        split[info.var_op] = (tuple(info.shards), info.axis)
        for slot, shards in info.slots.items():
            split[slot] = (tuple(shards), info.axis)
    return split


def layout(result, specs):
    """One ``Entry`` per spec (in key order) for a node's ``TransformResult``."""
    assignment = result.assignment
    facts = assignment.analysis.variables
    split = _split_map(result.partitions)
    entries = []
    for key in sorted(specs):
        spec = specs[key]
        names, axis = split.get(spec.op_name, ((spec.op_name,), 0))
        pieces = []
        for name in names:
            if name not in facts:
                raise CheckpointError("variable '{}' (checkpoint name '{}') is not in the distributed graph; was "
                                      "it created after the session?".format(name, key))
            pieces.append(Piece(name=name, shape=facts[name].shape, shared=name in assignment.ps_state,
                                mean=getattr(result, "on_read", {}).get(name, "")))
        entries.append(Entry(spec=spec, axis=axis, pieces=tuple(pieces)))
    return entries


def original_names(result):
    """Op names of the single-device variables a node's ``TransformResult`` holds (partitioned ones whole)."""
    split = _split_map(result.partitions)
    shards = {name for names, _ in split.values() for name in names}
    return (set(result.assignment.analysis.variables) - shards) | set(split)
