"""Immutable framework-neutral values for what plain Python types cannot say.

An op attribute is a plain ``bool``/``int``/``float``/``str``/``bytes``/``None``
when that is unambiguous, and one of these classes otherwise:

    GenericDType        a data type (``dtypes.py``)
    GenericShape        dims as ints / None, or unknown rank; optional dim names
    GenericTensor       a numpy array plus its GenericDType (read from a GraphDef:
                        the TensorProto, decoded on demand and written back as is)
    GenericFunc         a function reference: name + nested attrs
    GenericList         a list attr of one kind ('s', 'i', 'f', 'b', 'type',
                        'shape', 'tensor', 'func'), kind kept even when empty
    GenericPlaceholder  a reference to a function's attr, by name

``to_generic`` turns convenient Python/numpy values into these (``np.float32``
-> GenericDType, ndarray -> GenericTensor, ``[1, 2]`` -> GenericList('i', ...)).
"""
import numpy as np

from autodist.ir.dtypes import GenericDType

__all__ = [
    "GenericDType", "GenericShape", "GenericTensor", "GenericFunc", "GenericList",
    "GenericPlaceholder", "LIST_KINDS", "to_generic", "GENERIC_TYPES",
]


class _Frozen:
    """Immutable value base: attributes are set once, in ``__init__``, via ``_set``."""

    __slots__ = ()

    def _set(self, **values):
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        raise AttributeError("{} is immutable".format(type(self).__name__))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        slots = [name for cls in type(self).__mro__ for name in getattr(cls, "__slots__", ())]
        return (_restore, (type(self), {name: getattr(self, name) for name in slots}))


def _restore(cls, state):
    """Unpickle a ``_Frozen`` value (its ``__setattr__`` refuses the default path)."""
    self = object.__new__(cls)
    self._set(**state)
    return self


class GenericShape(_Frozen):
    """A tensor shape: ``dims`` is a tuple of ints/None, or None for unknown rank."""

    __slots__ = ("dims", "names")

    def __init__(self, dims, names=None):
        if isinstance(dims, GenericShape):
            dims, names = dims.dims, dims.names if names is None else names
        if dims is not None:
            dims = tuple(_dim(d) for d in dims)
        if names is not None:
            names = tuple(str(n) for n in names)
            if dims is None or len(names) != len(dims):
                raise ValueError("GenericShape: {} dim names for shape {}".format(len(names), dims))
            if not any(names):
                names = None
        self._set(dims=dims, names=names)

    @property
    def rank(self):
        return None if self.dims is None else len(self.dims)

    @property
    def is_fully_defined(self):
        return self.dims is not None and None not in self.dims

    def as_list(self):
        """The IR's shape convention: a list of ints/None, or None for unknown rank."""
        return None if self.dims is None else list(self.dims)

    def num_elements(self):
        """Number of elements, or None unless fully defined."""
        return int(np.prod(self.dims, dtype=np.int64)) if self.is_fully_defined else None

    def __eq__(self, other):
        return isinstance(other, GenericShape) and (self.dims, self.names) == (other.dims, other.names)

    def __hash__(self):
        return hash(("GenericShape", self.dims, self.names))

    def __repr__(self):
        extra = ", names={!r}".format(self.names) if self.names else ""
        return "GenericShape({!r}{})".format(None if self.dims is None else list(self.dims), extra)


def _dim(d):
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
        raise TypeError("GenericShape: dim {!r} is not an int or None".format(d))
    if d < -1:
        raise ValueError("GenericShape: negative dim {}".format(d))
    return None if d == -1 else int(d)


class GenericTensor(_Frozen):
    """A constant tensor: its ``dtype``, ``shape`` (tuple) and a read-only numpy ``array``.

    ``GenericTensor(array, dtype)`` builds one from values. ``from_proto`` keeps a
    private copy of a TensorProto instead: ``array`` is decoded on first use and
    the very same message is written back, so reading a GraphDef costs no decoding
    and loses nothing. ``array`` is None (``is_opaque``) for element types numpy
    cannot hold (bfloat16, float8, resource handles...) and for proto fields the
    IR does not model; such tensors still round-trip through their message.
    """

    __slots__ = ("dtype", "shape", "_array", "_proto")

    def __init__(self, array, dtype=None):
        if dtype is not None and not isinstance(dtype, GenericDType):
            dtype = to_generic(dtype)
            if not isinstance(dtype, GenericDType):
                raise TypeError("GenericTensor: dtype {!r} is not a data type".format(dtype))
        arr = np.asarray(array)
        dtype = dtype or GenericDType.from_numpy(arr.dtype)
        if dtype.np_dtype is None:
            raise TypeError("GenericTensor: {} values have no numpy type; read such tensors "
                            "with GenericTensor.from_proto".format(dtype.name))
        arr = np.array(arr, dtype=dtype.np_dtype, copy=True)
        arr.setflags(write=False)
        self._set(dtype=dtype, shape=tuple(arr.shape), _array=arr, _proto=None)

    @classmethod
    def from_proto(cls, proto):
        """Wrap a copy of a TensorProto-shaped message; decoding waits for ``array``."""
        held = type(proto)()
        held.CopyFrom(proto)
        tensor_shape = held.tensor_shape
        shape = None if tensor_shape.unknown_rank else tuple(
            None if d.size < 0 else d.size for d in tensor_shape.dim)
        self = object.__new__(cls)
        self._set(dtype=GenericDType(held.dtype), shape=shape, _array=_UNDECODED, _proto=held)
        return self

    @property
    def array(self):
        if self._array is _UNDECODED:
            from autodist.ir.converters import decode_tensor_proto
            arr = decode_tensor_proto(self._proto)
            if arr is not None:
                arr.setflags(write=False)
            object.__setattr__(self, "_array", arr)
        return self._array

    @property
    def proto(self):
        """The TensorProto this tensor was read from, or None if built from values."""
        return self._proto

    @property
    def is_opaque(self):
        return self.array is None

    def __eq__(self, other):
        if not isinstance(other, GenericTensor) or (self.dtype, self.shape) != (other.dtype, other.shape):
            return False
        if self._proto is not None and other._proto is not None and (
                self._proto.SerializeToString() == other._proto.SerializeToString()):
            return True
        if self.is_opaque or other.is_opaque:
            return False
        if self.array.dtype.kind == "O":
            return self.array.tolist() == other.array.tolist()
        return self.array.tobytes() == other.array.tobytes()

    def __hash__(self):
        return hash(("GenericTensor", self.dtype, self.shape))

    def __reduce__(self):
        if self._proto is not None:
            return (GenericTensor.from_proto, (self._proto,))
        return (GenericTensor, (self._array, self.dtype))

    def __repr__(self):
        if self.is_opaque:
            return "GenericTensor(<opaque {}>, shape={})".format(self.dtype.name, self.shape)
        body = np.array2string(self.array, threshold=8) if self.array.size <= 64 else "..."
        return "GenericTensor({}, dtype={}, shape={})".format(body, self.dtype.name, self.shape)


_UNDECODED = object()


class GenericFunc(_Frozen):
    """A function reference (TF ``NameAttrList``): ``name`` and nested ``attr``."""

    __slots__ = ("name", "_attr")

    def __init__(self, name, attr=None):
        if not isinstance(name, str):
            raise TypeError("GenericFunc: name must be a str, got {!r}".format(name))
        items = tuple(sorted((str(k), to_generic(v)) for k, v in (attr or {}).items()))
        self._set(name=name, _attr=items)

    @property
    def attr(self):
        return dict(self._attr)

    def __eq__(self, other):
        return isinstance(other, GenericFunc) and (self.name, self._attr) == (other.name, other._attr)

    def __hash__(self):
        return hash(("GenericFunc", self.name, self._attr))

    def __repr__(self):
        return "GenericFunc({!r}, {!r})".format(self.name, self.attr)


class GenericPlaceholder(_Frozen):
    """An attr whose value is another attr of the enclosing function, by name."""

    __slots__ = ("name",)

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError("GenericPlaceholder: name must be a str, got {!r}".format(name))
        self._set(name=name)

    def __eq__(self, other):
        return isinstance(other, GenericPlaceholder) and other.name == self.name

    def __hash__(self):
        return hash(("GenericPlaceholder", self.name))

    def __repr__(self):
        return "GenericPlaceholder({!r})".format(self.name)


def _as_int(v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError("not an int: {!r}".format(v))
    return int(v)


def _as_float(v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError("not a float: {!r}".format(v))
    return float(v)


def _as_bool(v):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError("not a bool: {!r}".format(v))
    return bool(v)


def _as_str(v):
    if not isinstance(v, (str, bytes)):
        raise TypeError("not a str or bytes: {!r}".format(v))
    return v


def _as(cls):
    def check(v):
        v = to_generic(v)
        if not isinstance(v, cls):
            raise TypeError("not a {}: {!r}".format(cls.__name__, v))
        return v
    return check


# kind -> element normalizer; the kinds are the fields of TF's AttrValue.ListValue.
LIST_KINDS = {
    "s": _as_str, "i": _as_int, "f": _as_float, "b": _as_bool, "type": _as(GenericDType),
    "shape": _as(GenericShape), "tensor": _as(GenericTensor), "func": _as(GenericFunc),
}


class GenericList(_Frozen):
    """A list attr of one ``kind``; ``kind`` may be None only for an empty list.

    An empty TF ListValue does not record its kind, so ``GenericList(None, ())``
    is what a GraphDef gives back; empty lists compare equal whatever their kind.
    """

    __slots__ = ("kind", "values")

    def __init__(self, kind, values=()):
        values = tuple(values)
        if kind is None:
            if values:
                raise ValueError("GenericList: a non-empty list needs a kind")
        elif kind not in LIST_KINDS:
            raise ValueError("GenericList: unknown kind {!r}; expected one of {}".format(
                kind, sorted(LIST_KINDS)))
        else:
            try:
                values = tuple(LIST_KINDS[kind](v) for v in values)
            except TypeError as err:
                raise TypeError("GenericList({!r}): {}".format(kind, err)) from None
        self._set(kind=kind, values=values)

    def __len__(self):
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    def __getitem__(self, index):
        return self.values[index]

    def __eq__(self, other):
        if not isinstance(other, GenericList) or self.values != other.values:
            return False
        return not self.values or self.kind == other.kind

    def __hash__(self):
        return hash(("GenericList", self.values))

    def __repr__(self):
        return "GenericList({!r}, {!r})".format(self.kind, list(self.values))


GENERIC_TYPES = (bool, int, float, str, bytes, type(None), GenericDType, GenericShape,
                 GenericTensor, GenericFunc, GenericList, GenericPlaceholder)

_KIND_OF = [(bool, "b"), (int, "i"), (float, "f"), ((str, bytes), "s"), (GenericDType, "type"),
            (GenericShape, "shape"), (GenericTensor, "tensor"), (GenericFunc, "func")]


def to_generic(value):
    """Normalize a convenient Python/numpy value to a generic attr value.

    Raises TypeError for values with no generic form (including an empty plain
    list, whose kind is unknown: pass ``GenericList(kind, ())``).
    """
    if isinstance(value, np.generic):  # before GENERIC_TYPES: np.float64 is a float
        return value.item() if not isinstance(value, np.bytes_) else bytes(value)
    if isinstance(value, GENERIC_TYPES):
        return value
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return GenericDType.from_numpy(value)
    if hasattr(value, "as_datatype_enum"):  # a tf.DType, recognized without importing TF
        return GenericDType(value.as_datatype_enum)
    if isinstance(value, np.ndarray):
        return GenericTensor(value)
    if isinstance(value, (list, tuple)):
        if not value:
            raise TypeError("an empty list has no kind; use GenericList(kind, ())")
        items = [to_generic(v) for v in value]
        for cls, kind in _KIND_OF:
            if all(isinstance(v, cls) and (cls is not int or not isinstance(v, bool)) for v in items):
                return GenericList(kind, items)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return GenericList("f", items)
        raise TypeError("list {!r} mixes kinds".format(value))
    raise TypeError("{!r} ({}) has no generic attr form".format(value, type(value).__name__))
