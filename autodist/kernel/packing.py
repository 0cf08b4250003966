"""Flatten-and-concatenate and split-and-reshape of many tensors, written straight into the GraphDef.

Fused collectives, fused parameter-server pushes and the initial broadcast
move many tensors as one flat vector::

    pack:     a, b, c --Reshape([-1]) each--> ConcatV2 --> flat                  (on one device)
    unpack:   flat --SplitV(sizes)--> pieces --Reshape(shape) each--> a', b', c'

and the broadcast reads and writes many variables (``read_variables``,
``assign_variables``: one ``ReadVariableOp`` / ``AssignVariableOp`` each).

Built with the TensorFlow API these are two ops per tensor at ~0.5 ms each
(a stand-in placeholder per input on top), which for 10k variables was most
of the transform. Here the NodeDefs are written directly (tens of
microseconds each) and spliced into the ``GraphDefEditor``, with one shape
constant per distinct shape; the ops are the ones ``tf.reshape``, ``tf.concat``
and ``tf.split`` make, so the imported graph is the same. Callers pass static
facts (dtype, fully defined shapes) that the editor also records, so later
scratch graphs can take the packed tensor as an input.

Names are ``<scope>pack...`` / ``<scope>unpack...``, which no scratch graph
makes (its ops keep TensorFlow's own names), so the two never collide.
"""
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2, tensor_pb2, types_pb2

__all__ = ["pack", "unpack", "read_variables", "assign_variables"]


def _node(name, op, device, inputs, **attrs):
    node = node_def_pb2.NodeDef(name=name, op=op, device=device, input=inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _type(dtype):
    return attr_value_pb2.AttrValue(type=dtype.as_datatype_enum)


def _int_const(name, values, device, vector=True):
    """An int32 ``Const`` (a vector of ``values``, or the scalar ``values[0]``)."""
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32)
    if vector:
        proto.tensor_shape.dim.add(size=len(values))
    if len(set(values)) == 1 and values:
        proto.int_val.append(int(values[0]))   # TensorFlow repeats the last value: one is enough
    else:
        proto.tensor_content = np.asarray(values, np.int32).tobytes()
    return _node(name, "Const", device, [], dtype=_type(tf.int32), value=attr_value_pb2.AttrValue(tensor=proto))


class _Consts:
    """One int32 constant per distinct value list under ``scope`` (a shape, an axis, the split sizes)."""

    def __init__(self, prefix, device, nodes):
        self._prefix, self._device, self._nodes, self._made = prefix, device, nodes, {}

    def __call__(self, values, vector=True):
        key = (tuple(values), vector)
        if key not in self._made:
            name = "{}_const_{}".format(self._prefix, len(self._made))
            self._nodes.append(_int_const(name, list(values), self._device, vector))
            self._made[key] = name
        return self._made[key]


def _reshape(name, tensor, shape_const, dtype, device):
    return _node(name, "Reshape", device, [tensor, shape_const], T=_type(dtype), Tshape=_type(tf.int32))


def pack(editor, tensors, dtype, shapes, scope, device):
    """Append ops that flatten ``tensors`` (names, of ``dtype`` and the fully defined ``shapes``) and concatenate
    them into one vector on ``device``; returns ``(its name, the names of the ops added)``. One tensor is only
    flattened (a vector is its own flat form)."""
    nodes, signatures = [], {}
    const = _Consts(scope + "pack", device, nodes)
    flat = []
    for index, (tensor, shape) in enumerate(zip(tensors, shapes)):
        if shape.rank == 1:
            flat.append(tensor)
            continue
        name = "{}pack_in_{}".format(scope, index)
        nodes.append(_reshape(name, tensor, const([-1]), dtype, device))
        flat.append(name + ":0")
    total = sum(shape.num_elements() for shape in shapes)
    if len(flat) == 1:
        out = flat[0]
    else:
        name = scope + "pack"
        nodes.append(_node(name, "ConcatV2", device, flat + [const([0], vector=False)],
                           N=attr_value_pb2.AttrValue(i=len(flat)), T=_type(dtype), Tidx=_type(tf.int32)))
        out = name + ":0"
    signatures[out] = (dtype, tf.TensorShape([total]))
    editor.append(nodes, signatures)
    return out, [node.name for node in nodes]


def unpack(editor, flat, dtype, shapes, scope, device):
    """Append ops that split the vector ``flat`` into pieces of ``shapes`` (fully defined) on ``device``;
    returns ``(the pieces' names in order, the names of the ops added)``."""
    nodes, signatures = [], {}
    const = _Consts(scope + "unpack", device, nodes)
    sizes = [shape.num_elements() for shape in shapes]
    if len(shapes) > 1:
        split = scope + "unpack"
        nodes.append(_node(split, "SplitV", device, [flat, const(sizes), const([0], vector=False)],
                           num_split=attr_value_pb2.AttrValue(i=len(sizes)), T=_type(dtype),
                           Tlen=_type(tf.int32)))
        pieces = ["{}:{}".format(split, i) for i in range(len(sizes))]
    else:
        pieces = [flat]
    out = []
    for index, (piece, shape) in enumerate(zip(pieces, shapes)):
        signatures[piece] = (dtype, tf.TensorShape([sizes[index]]))
        if shape.rank == 1:
            out.append(piece)
            continue
        name = "{}unpack_out_{}".format(scope, index)
        nodes.append(_reshape(name, piece, const(shape.as_list()), dtype, device))
        signatures[name + ":0"] = (dtype, shape)
        out.append(name + ":0")
    editor.append(nodes, signatures)
    return out, [node.name for node in nodes]



def read_variables(editor, handles, dtype, scope, device):
    """Append a ``ReadVariableOp`` of every resource handle in ``handles`` (tensor names, values of ``dtype``)
    on ``device``; returns ``(the values' names, the names of the ops added)``."""
    nodes = [_node("{}read_{}".format(scope, i), "ReadVariableOp", device, [handle], dtype=_type(dtype))
             for i, handle in enumerate(handles)]
    editor.append(nodes, {})
    return [node.name + ":0" for node in nodes], [node.name for node in nodes]


def assign_variables(editor, handles, values, dtype, scope, device):
    """Append an ``AssignVariableOp`` of every value to its handle on ``device``; returns the ops' names."""
    nodes = [_node("{}assign_{}".format(scope, i), "AssignVariableOp", device, [handle, value], dtype=_type(dtype),
                   validate_shape=attr_value_pb2.AttrValue(b=False))
             for i, (handle, value) in enumerate(zip(handles, values))]
    editor.append(nodes, {})
    return [node.name for node in nodes]
