"""``TensorInfo``: a tensor of an ``IRGraph``, referring to its op by name.

Ownership: a tensor belongs to the graph passed to its constructor (``ugraph``);
``move_into`` hands it to another graph. A tensor whose ``op_name`` names no op
of its graph is *dangling*; a *null* tensor (``op_name is None``) comes from no
op at all and marks a missing input (see ``make_null_tensor``).

``name``, ``op_name``, ``dtype`` and ``shape`` are plain attributes that callers
may edit; they are validated only when the tensor is built.
"""
import re

import numpy as np

from autodist.ir.dtypes import GenericDType

__all__ = ["TensorInfo", "NULL_OP_PREFIX"]

# Null tensors are named "<null>:k": '<' cannot appear in a TF op name, so they
# never collide with a real tensor.
NULL_OP_PREFIX = "<null>"
_TENSOR_NAME = re.compile(r"(.+):(\d+)\Z", re.S)


def _check_graph(ugraph, what):
    from autodist.ir.graph import IRGraph  # graph.py imports this module
    if not isinstance(ugraph, IRGraph):
        raise TypeError("{}: ugraph must be an IRGraph, got {!r}".format(what, type(ugraph).__name__))


def normalize_dtype(dtype, what):
    """None (unknown) or a numpy dtype; GenericDType and anything numpy accepts are converted."""
    if dtype is None:
        return None
    if isinstance(dtype, GenericDType):
        return dtype.np_dtype
    try:
        return np.dtype(dtype)
    except TypeError as err:
        raise TypeError("{}: dtype {!r} is not a numpy dtype".format(what, dtype)) from err


def normalize_shape(shape, what):
    """None (unknown rank) or a list of non-negative ints / None (-1 reads as None)."""
    if shape is None:
        return None
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError("{}: shape must be a list of ints/None or None, got {!r}".format(what, shape))
    out = []
    for dim in shape:
        if dim is None or dim == -1 and not isinstance(dim, bool):
            out.append(None)
        elif isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError("{}: shape {!r} has a non-int dim {!r}".format(what, shape, dim))
        elif dim < 0:
            raise ValueError("{}: shape {!r} has a negative dim".format(what, shape))
        else:
            out.append(int(dim))
    return out


class TensorInfo:
    """A tensor: ``name`` ("op:k"), producing ``op_name``, numpy ``dtype``, ``shape``, ``ugraph``."""

    __slots__ = ("name", "op_name", "dtype", "shape", "_ugraph")

    def __init__(self, name, op_name, dtype, shape, ugraph):
        what = "TensorInfo {!r}".format(name)
        if not isinstance(name, str) or not name:
            raise TypeError("TensorInfo: name must be a non-empty str, got {!r}".format(name))
        if op_name is not None:
            if not isinstance(op_name, str) or not op_name:
                raise TypeError("{}: op_name must be a non-empty str or None".format(what))
            match = _TENSOR_NAME.match(name)
            if match is None or match.group(1) != op_name:
                raise ValueError("{}: a tensor of op {!r} must be named '{}:<index>'".format(
                    what, op_name, op_name))
        _check_graph(ugraph, what)
        self.name = name
        self.op_name = op_name
        self.dtype = normalize_dtype(dtype, what)
        self.shape = normalize_shape(shape, what)
        self._ugraph = ugraph

    @classmethod
    def _trusted(cls, name, op_name, dtype, shape, ugraph):
        """Build without validation, for code that derived the fields from a checked source."""
        self = object.__new__(cls)
        self.name, self.op_name, self.dtype, self.shape, self._ugraph = name, op_name, dtype, shape, ugraph
        return self

    @classmethod
    def make_null_tensor(cls, ugraph, dtype=np.dtype("float"), shape=None):
        """A tensor that no op produces, owned by ``ugraph``: a placeholder for a missing input.

        Ops with a null input are ``ugraph.input_ops``; a GraphDef cannot express
        one, so ``IRGraph.graph_def`` refuses graphs that still hold null inputs.
        """
        _check_graph(ugraph, "TensorInfo.make_null_tensor")
        name = "{}:{}".format(NULL_OP_PREFIX, ugraph._next_null_index())
        return cls(name, None, dtype, shape, ugraph)

    @property
    def ugraph(self):
        return self._ugraph

    @property
    def op(self):
        """The producing ``OperationInfo``; None for a null tensor."""
        if self.op_name is None:
            return None
        op = self._ugraph.ops_info.get(self.op_name)
        if op is None:
            raise ValueError("TensorInfo {!r} is dangling: its graph has no op {!r}".format(
                self.name, self.op_name))
        return op

    @property
    def is_null_tensor(self):
        return self.op_name is None

    @property
    def is_dangling(self):
        return self.op_name is not None and self.op_name not in self._ugraph.ops_info

    @property
    def index(self):
        """Output index within the producing op ("op:k" -> k)."""
        return int(self.name.rpartition(":")[2])

    @property
    def lib_name(self):
        return self._ugraph.lib_name

    def move_into(self, ugraph):
        """Transfer ownership of this tensor to ``ugraph`` (its producer is not moved)."""
        _check_graph(ugraph, "TensorInfo {!r}.move_into".format(self.name))
        self._ugraph = ugraph

    def _copy_to(self, ugraph):
        shape = None if self.shape is None else list(self.shape)
        return TensorInfo._trusted(self.name, self.op_name, self.dtype, shape, ugraph)

    def __copy__(self):
        raise TypeError("TensorInfo {!r}: shallow copy is not allowed (the copy would share "
                        "ownership); use copy.deepcopy or move_into".format(self.name))

    def __deepcopy__(self, memo):
        """Deep-copies the owning graph too (once per memo); returns this tensor's twin in it."""
        import copy
        return self._copy_to(copy.deepcopy(self._ugraph, memo))

    def __repr__(self):
        return "TensorInfo(name={!r}, dtype={}, shape={!r})".format(
            self.name, None if self.dtype is None else self.dtype.name, self.shape)
