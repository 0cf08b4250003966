"""TensorFlow ``AttrValue`` <-> generic attr values, without importing TensorFlow.

Protobuf messages are duck-typed (``WhichOneof``, field access), so any
wire-compatible AttrValue class works. Decoding reads a message; encoding fills a
message the caller created (``node.attr[key]``), so neither side needs TF.

    AttrValue field      generic value                     back
    ---------------      -------------                     ----
    s                    str if valid UTF-8, else bytes    s (str UTF-8 encoded)
    i / f / b            int / float / bool                i / f / b
    type                 GenericDType(enum)                type
    shape                GenericShape(dims|None, names)    shape (-1 <-> None dims)
    tensor               GenericTensor (see below)         tensor
    func                 GenericFunc(name, attr)           func
    placeholder          GenericPlaceholder(name)          placeholder
    list                 GenericList(kind, values)         list; empty -> ``list {}``
    (nothing set)        None                              (nothing set)

Keys starting with a single underscore (the spec's ``_[^_]*``, read as "starts
with one ``_``", so ``_class`` and ``_output_shapes`` but not ``__x``) are private:
their values are kept as given (AttrValue messages included) and written back
as-is; a private value that is neither an AttrValue nor a generic value is IR-only
metadata and is left out of GraphDefs.

A tensor read from a GraphDef keeps its TensorProto and is written back
unchanged; its ``array`` decodes on demand (TF's "splat" rule: fewer values than
elements repeats the last one; no values means zeros). A tensor built from an
array is encoded canonically: one value when all elements are equal (bitwise),
else ``tensor_content`` (``string_val`` for strings).
"""
import numpy as np

from autodist.ir.dtypes import GenericDType
from autodist.ir.generic import (
    GenericFunc, GenericList, GenericPlaceholder, GenericShape, GenericTensor, LIST_KINDS,
    to_generic,
)

__all__ = [
    "is_private_key", "from_attr_value", "to_attr_value", "convert_op_attr", "read_attr_map",
    "write_op_attr",
    "shape_from_proto", "shape_to_proto", "tensor_to_proto",
    "decode_tensor_proto",
]


def is_private_key(key):
    """True for attr keys kept as given: a single leading underscore."""
    return key[:1] == "_" and key[1:2] != "_"


def from_attr_value(attr):
    """Decode one AttrValue message into a generic value."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    if which in _SCALAR_DECODERS:
        return _SCALAR_DECODERS[which](getattr(attr, which))
    if which == "list":
        return _list_from_proto(attr.list)
    raise ValueError("AttrValue field {!r} is not modelled".format(which))


def _decode_s(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return bytes(raw)


def func_from_proto(proto):
    return GenericFunc(proto.name, {k: from_attr_value(v) for k, v in proto.attr.items()})


def shape_from_proto(proto):
    if proto.unknown_rank:
        return GenericShape(None)
    dims = proto.dim
    return GenericShape([d.size for d in dims], [d.name for d in dims])


_SCALAR_DECODERS = {
    "s": _decode_s, "i": int, "f": float, "b": bool, "type": GenericDType,
    "shape": shape_from_proto, "tensor": GenericTensor.from_proto, "func": func_from_proto,
    "placeholder": GenericPlaceholder,
}


def _list_from_proto(proto):
    found = [kind for kind in LIST_KINDS if len(getattr(proto, kind))]
    if not found:
        return GenericList(None, ())
    if len(found) > 1:
        raise ValueError("AttrValue list mixes kinds {}".format(found))
    kind = found[0]
    decode = _SCALAR_DECODERS[kind]
    return GenericList(kind, [decode(v) for v in getattr(proto, kind)])


def to_attr_value(value, attr):
    """Fill the (empty) AttrValue message ``attr`` from a generic value."""
    value = to_generic(value)
    if value is None:
        return attr
    if isinstance(value, GenericList):
        attr.list.SetInParent()
        for v in value.values:
            _add_list_item(attr.list, value.kind, v)
        return attr
    for cls, field in _SCALAR_FIELDS:
        if isinstance(value, cls):
            field(attr, value)
            return attr
    raise TypeError("{!r} has no AttrValue form".format(value))


def _set_s(attr, v):
    attr.s = v.encode("utf-8") if isinstance(v, str) else v


def _set_sub(name, fill):
    def setter(attr, v):
        sub = getattr(attr, name)
        sub.SetInParent()
        fill(v, sub)
    return setter


def func_to_proto(func, proto):
    proto.name = func.name
    for key, v in func.attr.items():
        to_attr_value(v, proto.attr[key])


# (value class, writer); shape_to_proto / tensor_to_proto are defined below, hence the lambdas.
_SCALAR_FIELDS = [
    (bool, lambda a, v: setattr(a, "b", v)),
    (int, lambda a, v: setattr(a, "i", v)),
    (float, lambda a, v: setattr(a, "f", v)),
    ((str, bytes), _set_s),
    (GenericDType, lambda a, v: setattr(a, "type", v.enum)),
    (GenericShape, _set_sub("shape", lambda v, p: shape_to_proto(v, p))),
    (GenericTensor, _set_sub("tensor", lambda v, p: tensor_to_proto(v, p))),
    (GenericFunc, _set_sub("func", func_to_proto)),
    (GenericPlaceholder, lambda a, v: setattr(a, "placeholder", v.name)),
]


def _add_list_item(proto, kind, v):
    field = getattr(proto, kind)
    if kind == "s":
        field.append(v.encode("utf-8") if isinstance(v, str) else v)
    elif kind == "type":
        field.append(v.enum)
    elif kind in ("i", "f", "b"):
        field.append(v)
    else:
        sub = field.add()
        {"shape": shape_to_proto, "tensor": tensor_to_proto, "func": func_to_proto}[kind](v, sub)


def shape_to_proto(shape, proto):
    if shape.dims is None:
        proto.unknown_rank = True
        return proto
    names = shape.names or ("",) * len(shape.dims)
    for size, name in zip(shape.dims, names):
        dim = proto.dim.add()
        dim.size = -1 if size is None else size
        if name:
            dim.name = name
    return proto


def convert_op_attr(attrs, where):
    """``op_attr`` in the IR's form: generic values, private keys kept as given."""
    out = {}
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise TypeError("{}: attr key {!r} is not a str".format(where, key))
        if is_private_key(key):
            out[key] = value
            continue
        try:
            out[key] = from_attr_value(value) if hasattr(value, "WhichOneof") else to_generic(value)
        except (TypeError, ValueError) as err:
            raise _named(err, "{}: attr {!r}".format(where, key)) from None
    return out


def read_attr_map(attr_map, node_name):
    """``op_attr`` of a NodeDef's ``attr`` map; private values are copies of the messages.

    The hot path of ``from_graph_def`` (one call per node), hence not shared with
    ``convert_op_attr``; the IR must not alias the caller's GraphDef.
    """
    out = {}
    key = None
    try:
        for key, value in attr_map.items():
            if is_private_key(key):
                held = type(value)()
                held.CopyFrom(value)
                out[key] = held
                continue
            out[key] = from_attr_value(value)
    except (TypeError, ValueError) as err:
        raise _named(err, "node {!r}: attr {!r}".format(node_name, key)) from None
    return out


def _named(err, where):
    """``err`` re-raised as TypeError (bad type) or ValueError (bad value), prefixed by ``where``."""
    return (TypeError if isinstance(err, TypeError) else ValueError)("{}: {}".format(where, err))


def write_op_attr(op_attr, attr_map, where):
    """Write ``op_attr`` into a NodeDef's ``attr`` map (see the module doc for private keys)."""
    for key, value in op_attr.items():
        target = attr_map[key] if not is_private_key(key) or _encodable(value) else None
        if target is None:
            continue
        if hasattr(value, "WhichOneof"):
            _copy_message(value, target)
            continue
        try:
            to_attr_value(value, target)
        except (TypeError, ValueError, OverflowError) as err:
            raise _named(err, "{}: attr {!r}".format(where, key)) from None


def _copy_message(source, target):
    """Copy between messages of one wire type, possibly from different generated modules."""
    if type(source) is type(target):
        target.CopyFrom(source)
    else:
        target.ParseFromString(source.SerializeToString())


def _encodable(value):
    if hasattr(value, "WhichOneof"):
        return True
    try:
        to_generic(value)
    except TypeError:
        return False
    return True


# --------------------------------------------------------------------------- tensors
# dtype name -> TensorProto value field for the types decoded to numpy arrays.
_VALUE_FIELD = {
    "float32": "float_val", "float64": "double_val", "int32": "int_val", "uint8": "int_val",
    "int16": "int_val", "int8": "int_val", "qint8": "int_val", "quint8": "int_val",
    "qint32": "int_val", "qint16": "int_val", "quint16": "int_val", "uint16": "int_val",
    "int64": "int64_val", "bool": "bool_val", "complex64": "scomplex_val",
    "complex128": "dcomplex_val", "float16": "half_val", "uint32": "uint32_val",
    "uint64": "uint64_val", "string": "string_val",
}
_COMPLEX_PART = {"complex64": np.float32, "complex128": np.float64}


def decode_tensor_proto(proto):
    """The numpy array of a TensorProto, or None where the IR keeps it opaque."""
    dtype = GenericDType(proto.dtype)
    shape = shape_from_proto(proto.tensor_shape)
    field = _VALUE_FIELD.get(dtype.name)
    present = {fd.name for fd, _ in proto.ListFields()} - {"dtype", "tensor_shape"}
    if (field is None or not shape.is_fully_defined or shape.names
            or not present <= {field, "tensor_content"} or len(present) > 1
            or (dtype.name == "string" and "tensor_content" in present)):
        return None
    n = shape.num_elements()
    np_dtype = dtype.np_dtype
    if "tensor_content" in present:
        content = proto.tensor_content
        if len(content) != n * np_dtype.itemsize:
            raise ValueError("TensorProto: {} content bytes for {} elements of {}".format(
                len(content), n, dtype.name))
        flat = np.frombuffer(content, dtype=np_dtype.newbyteorder("<")).astype(np_dtype)
    else:
        flat = _values_from_field(dtype.name, np_dtype, getattr(proto, field), n)
    return flat.reshape(shape.dims)


def _values_from_field(name, np_dtype, values, n):
    if name == "float16":
        flat = np.array(values, dtype=np.uint16).view(np.float16)
    elif name in _COMPLEX_PART:
        flat = np.array(values, dtype=_COMPLEX_PART[name]).view(np_dtype)
    elif name == "string":
        flat = np.empty(len(values), dtype=object)
        flat[:] = [bytes(v) for v in values]
    else:
        flat = np.array(values, dtype=np_dtype)
    if len(flat) > n:
        raise ValueError("TensorProto: {} values for {} elements".format(len(flat), n))
    if len(flat) == 0:
        return np.full(n, b"" if name == "string" else 0, dtype=np_dtype)
    if len(flat) < n:  # TF's rule: the last value fills the rest
        flat = np.concatenate([flat, np.full(n - len(flat), flat[-1], dtype=np_dtype)])
    return flat


def tensor_to_proto(tensor, proto):
    """Fill a TensorProto from a GenericTensor (canonical encoding, see module doc)."""
    if tensor.proto is not None:
        _copy_message(tensor.proto, proto)
        return proto
    proto.dtype = tensor.dtype.enum
    proto.tensor_shape.SetInParent()
    shape_to_proto(GenericShape(tensor.shape), proto.tensor_shape)
    arr = tensor.array
    if arr.size == 0:
        return proto
    name = tensor.dtype.name
    flat = arr.reshape(-1)
    if name == "string":
        values = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
        proto.string_val.extend(values[:1] if all(v == values[0] for v in values) else values)
        return proto
    if _all_equal_bits(flat):
        _set_single_value(proto, name, flat[:1])
    else:
        proto.tensor_content = flat.astype(flat.dtype.newbyteorder("<")).tobytes()
    return proto


def _all_equal_bits(flat):
    rows = np.ascontiguousarray(flat).view(np.uint8).reshape(flat.size, flat.dtype.itemsize)
    return bool((rows == rows[0]).all())


def _set_single_value(proto, name, one):
    field = getattr(proto, _VALUE_FIELD[name])
    if name == "float16":
        field.append(int(one.view(np.uint16)[0]))
    elif name in _COMPLEX_PART:
        field.extend([float(one[0].real), float(one[0].imag)])
    else:
        field.append(one[0].item())
