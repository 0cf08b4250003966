"""TensorFlow ``DataType`` enum numbers without TensorFlow.

The IR reads GraphDefs without importing TensorFlow, so the enum numbers of
``tensorflow/core/framework/types.proto`` are tabled here. ``GenericDType``
keeps the exact enum number (so a ``type`` attr round-trips losslessly, ref
types and types numpy cannot represent included) and offers the numpy view the
analysis code wants:

    GenericDType(1).name        -> "float32"      .np_dtype -> dtype('float32')
    GenericDType(101).name      -> "float32_ref"  .base     -> GenericDType(1)
    GenericDType(20).np_dtype   -> dtype('O')     (resource: no numeric value)
    GenericDType(14).np_dtype   -> None           (bfloat16: numpy has no such type)
"""
import numpy as np

__all__ = ["GenericDType", "REF_OFFSET", "numpy_dtype_of_enum"]

REF_OFFSET = 100

# enum -> (name, numpy dtype or None, byte size per element or None).
# Quantized types use the numpy integer type of the same width; string,
# resource and variant elements are Python objects (no fixed byte size).
_TABLE = {
    0: ("invalid", None, None),
    1: ("float32", np.dtype("float32"), 4),
    2: ("float64", np.dtype("float64"), 8),
    3: ("int32", np.dtype("int32"), 4),
    4: ("uint8", np.dtype("uint8"), 1),
    5: ("int16", np.dtype("int16"), 2),
    6: ("int8", np.dtype("int8"), 1),
    7: ("string", np.dtype(object), None),
    8: ("complex64", np.dtype("complex64"), 8),
    9: ("int64", np.dtype("int64"), 8),
    10: ("bool", np.dtype("bool"), 1),
    11: ("qint8", np.dtype("int8"), 1),
    12: ("quint8", np.dtype("uint8"), 1),
    13: ("qint32", np.dtype("int32"), 4),
    14: ("bfloat16", None, 2),
    15: ("qint16", np.dtype("int16"), 2),
    16: ("quint16", np.dtype("uint16"), 2),
    17: ("uint16", np.dtype("uint16"), 2),
    18: ("complex128", np.dtype("complex128"), 16),
    19: ("float16", np.dtype("float16"), 2),
    20: ("resource", np.dtype(object), None),
    21: ("variant", np.dtype(object), None),
    22: ("uint32", np.dtype("uint32"), 4),
    23: ("uint64", np.dtype("uint64"), 8),
    24: ("float8_e5m2", None, 1),
    25: ("float8_e4m3fn", None, 1),
    26: ("float8_e4m3fnuz", None, 1),
    27: ("float8_e4m3b11fnuz", None, 1),
    28: ("float8_e5m2fnuz", None, 1),
    29: ("int4", None, None),
    30: ("uint4", None, None),
    31: ("int2", None, None),
    32: ("uint2", None, None),
    33: ("float4_e2m1fn", None, None),
}

_BY_NAME = {name: enum for enum, (name, _, _) in _TABLE.items()}
_BY_NAME.update({"float": 1, "double": 2, "half": 19})

# numpy dtype -> enum, for the unambiguous (non-quantized) numeric types.
_FROM_NUMPY = {np_dtype: enum for enum, (name, np_dtype, _) in _TABLE.items()
               if np_dtype is not None and not name.startswith("q")
               and name not in ("resource", "variant")}


def numpy_dtype_of_enum(enum):
    """The numpy dtype of a ``DataType`` number (ref types map to their base), or None."""
    entry = _TABLE.get(enum - REF_OFFSET if _is_ref(enum) else enum)
    return entry[1] if entry else None


def _is_ref(enum):
    return REF_OFFSET < enum < 2 * REF_OFFSET


class GenericDType:
    """An immutable TensorFlow data type, identified by its ``DataType`` number."""

    __slots__ = ("_enum",)
    _interned = {}

    def __new__(cls, enum):
        """Instances are interned: one object per enum number."""
        cached = cls._interned.get(enum) if type(enum) is int else None
        if cached is not None:
            return cached
        if isinstance(enum, GenericDType):
            return enum
        if isinstance(enum, bool) or not isinstance(enum, (int, np.integer)):
            raise TypeError("GenericDType: expected a DataType enum number, got {!r}".format(enum))
        if enum < 0:
            raise ValueError("GenericDType: negative DataType enum {}".format(enum))
        self = object.__new__(cls)
        object.__setattr__(self, "_enum", int(enum))
        return cls._interned.setdefault(int(enum), self)

    def __setattr__(self, key, value):
        raise AttributeError("GenericDType is immutable")

    @classmethod
    def from_name(cls, name):
        """``"float32"``, ``"float"``, ``"resource"``, ``"int64_ref"`` ..."""
        ref = name.endswith("_ref")
        base = _BY_NAME.get(name[:-4] if ref else name)
        if base is None:
            raise ValueError("GenericDType: unknown data type name {!r}".format(name))
        return cls(base + REF_OFFSET if ref else base)

    @classmethod
    def from_numpy(cls, dtype):
        """The TF type of a numpy dtype; object maps to ``string``, as TensorFlow does."""
        try:
            np_dtype = np.dtype(dtype)
        except TypeError as err:
            raise TypeError("GenericDType: {!r} is not a numpy dtype".format(dtype)) from err
        if np_dtype.kind in "OSU":
            return cls(7)
        enum = _FROM_NUMPY.get(np_dtype.newbyteorder("=") if np_dtype.byteorder == ">" else np_dtype)
        if enum is None:
            raise TypeError("GenericDType: numpy dtype {} has no TensorFlow type".format(np_dtype))
        return cls(enum)

    @property
    def enum(self):
        return self._enum

    @property
    def is_ref(self):
        return _is_ref(self._enum)

    @property
    def base(self):
        return GenericDType(self._enum - REF_OFFSET) if self.is_ref else self

    @property
    def name(self):
        entry = _TABLE.get(self.base.enum)
        base_name = entry[0] if entry else "dtype_{}".format(self.base.enum)
        return base_name + "_ref" if self.is_ref else base_name

    @property
    def np_dtype(self):
        """numpy dtype of the values (ref types: of the referenced values); None if none fits."""
        return numpy_dtype_of_enum(self._enum)

    @property
    def itemsize(self):
        """Bytes per element, None for variable-size or sub-byte elements."""
        entry = _TABLE.get(self.base.enum)
        return entry[2] if entry else None

    def __eq__(self, other):
        return isinstance(other, GenericDType) and other._enum == self._enum

    def __hash__(self):
        return hash(("GenericDType", self._enum))

    def __repr__(self):
        return "GenericDType({!r})".format(self.name)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (GenericDType, (self._enum,))
