"""GraphItem files: a ``autodist.proto.GraphItem`` message (never pickle).

The file holds the GraphDef (with its function library), the gradient records
by tensor name, ``Info`` (VariableDef / SaverDef protos, table initializer
names) and the optimizer's class path and constructor arguments. Optimizer
arguments are encoded as JSON-like values; anything else (a tensor, a
learning-rate schedule object) is kept as its repr and comes back as an
``UnrepresentableArg``.
"""
import dataclasses
import importlib

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import variable_pb2
from tensorflow.core.protobuf import saver_pb2

from autodist.errors import GraphItemError
from autodist.capture.info import GradRecord
from autodist.fileio import atomic_write_bytes
from autodist.proto import graph_item_pb2

__all__ = ["UnrepresentableArg", "write_graph_item", "read_graph_item", "encode_arg", "decode_arg",
           "class_path", "load_class"]


@dataclasses.dataclass(frozen=True)
class UnrepresentableArg:
    """An optimizer argument that had no faithful encoding; ``text`` is its repr."""

    text: str


def encode_arg(value):
    """Encode a Python value as an ``ArgValue`` message."""
    msg = graph_item_pb2.ArgValue()
    if value is None:
        msg.none = True
    elif isinstance(value, (bool, np.bool_)):
        msg.bool_value = bool(value)
    elif isinstance(value, (int, np.integer)):
        msg.int_value = int(value)
    elif isinstance(value, (float, np.floating)):
        msg.float_value = float(value)
    elif isinstance(value, str):
        msg.string_value = value
    elif isinstance(value, (list, tuple)):
        target = msg.list_value if isinstance(value, list) else msg.tuple_value
        target.SetInParent()
        for v in value:
            target.values.append(encode_arg(v))
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        msg.map_value.SetInParent()
        for k, v in value.items():
            msg.map_value.values[k].CopyFrom(encode_arg(v))
    elif isinstance(value, UnrepresentableArg):
        msg.unrepresentable = value.text
    else:
        msg.unrepresentable = repr(value)
    return msg


def decode_arg(msg):
    """Decode an ``ArgValue`` message."""
    kind = msg.WhichOneof("kind")
    if kind in (None, "none"):
        return None
    if kind == "list_value":
        return [decode_arg(v) for v in msg.list_value.values]
    if kind == "tuple_value":
        return tuple(decode_arg(v) for v in msg.tuple_value.values)
    if kind == "map_value":
        return {k: decode_arg(v) for k, v in sorted(msg.map_value.values.items())}
    if kind == "unrepresentable":
        return UnrepresentableArg(msg.unrepresentable)
    return getattr(msg, kind)


def class_path(cls):
    return "{}.{}".format(cls.__module__, cls.__qualname__)


def load_class(path):
    """Import the class named by a dotted ``module.Class`` path."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise GraphItemError("cannot import optimizer class '{}'; is the package that defines it "
                         "installed in this environment?".format(path))


def _to_message(item):
    msg = graph_item_pb2.GraphItem()
    msg.graph_def = item.graph.as_graph_def().SerializeToString(deterministic=True)
    for r in item.grad_records:
        msg.grad_target_pairs.add(target=r.target, grad=r.grad, grad_indices=r.indices,
                                  grad_values=r.values, grad_dense_shape=r.dense_shape,
                                  update_op=r.update_op)
    msg.info.variables.extend(v.SerializeToString(deterministic=True) for v in item.info.variables)
    msg.info.table_initializers.extend(item.info.table_initializers)
    msg.info.savers.extend(s.SerializeToString(deterministic=True) for s in item.info.savers)
    msg.train_ops.extend(item.train_op_names)
    for train_op, ops in item.micro_step_ops.items():
        msg.micro_steps.add(train_op=train_op, ops=ops)
    msg.accumulation_steps = item.accumulation_steps or 0
    msg.every_step_train_ops.extend(item.every_step_train_ops)
    if item.optimizer is not None:
        msg.optimizer.class_path = class_path(item.optimizer)
        msg.optimizer.args.extend(encode_arg(a) for a in item.optimizer_args)
        for key, value in item.optimizer_kwargs.items():
            msg.optimizer.kwargs[key].CopyFrom(encode_arg(value))
    return msg


def write_graph_item(item, path):
    """Serialize ``item`` to ``path`` atomically."""
    atomic_write_bytes(path, _to_message(item).SerializeToString(deterministic=True), mode=0o644)


def read_graph_item(cls, path):
    """Build a ``cls`` (GraphItem) from a file written by ``write_graph_item``."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphItemError("cannot read graph item file '{}': {}".format(path, e.strerror)) from e
    msg = graph_item_pb2.GraphItem()
    try:
        msg.ParseFromString(data)
        graph_def = tf.compat.v1.GraphDef.FromString(msg.graph_def)
    except Exception as e:  # protobuf raises DecodeError and friends
        raise GraphItemError("'{}' is not a graph item file: {}".format(path, e)) from e
    item = cls(graph_def=graph_def)
    item.info.variables = [variable_pb2.VariableDef.FromString(b) for b in msg.info.variables]
    item.info.table_initializers = list(msg.info.table_initializers)
    item.info.savers = [saver_pb2.SaverDef.FromString(b) for b in msg.info.savers]
    item.info.restore_collections(item.graph)
    item.add_grad_records(
        GradRecord(target=p.target, grad=p.grad, indices=p.grad_indices, values=p.grad_values,
                   dense_shape=p.grad_dense_shape, update_op=p.update_op)
        for p in msg.grad_target_pairs)
    item.extend_train_ops(list(msg.train_ops))
    for micro in msg.micro_steps:
        item.extend_micro_step_ops(micro.train_op, list(micro.ops), msg.accumulation_steps)
    item.mark_every_step(list(msg.every_step_train_ops))
    if msg.optimizer.class_path:
        item.extend_optimizer_info(load_class(msg.optimizer.class_path),
                                   *[decode_arg(a) for a in msg.optimizer.args],
                                   **{k: decode_arg(v) for k, v in msg.optimizer.kwargs.items()})
    return item
