"""Output inference for bare GraphDefs (no op registry): counts, dtypes, shapes."""
import numpy as np
import pytest

from autodist.ir.generic import GenericDType, GenericList, GenericShape, GenericTensor
from autodist.ir.signatures import infer_outputs

F32, I32, I64 = (GenericDType.from_name(n) for n in ("float32", "int32", "int64"))


@pytest.mark.parametrize("op_type, attr, n_ref, expected", [
    ("Const", {"dtype": F32, "value": GenericTensor(np.zeros((2, 3), np.float32))}, 0,
     [(np.float32, [2, 3])]),
    ("Placeholder", {"dtype": I32, "shape": GenericShape([None, 4])}, 0, [(np.int32, [None, 4])]),
    ("VarHandleOp", {"dtype": F32, "shape": GenericShape([5])}, 0, [(np.dtype(object), [])]),
    ("VariableV2", {"dtype": F32, "shape": GenericShape([5])}, 0, [(np.float32, [5])]),
    ("Split", {"T": F32, "num_split": 3}, 1, [(np.float32, None)] * 3),
    ("Unique", {"T": F32, "out_idx": I64}, 0, [(np.float32, None), (np.int64, None)]),
    ("Merge", {"T": F32, "N": 2}, 0, [(np.float32, None), (np.int32, None)]),
    ("Equal", {"T": F32}, 0, [(np.bool_, None)]),
    ("While", {"T": GenericList("type", [I32, F32])}, 0, [(np.int32, None), (np.float32, None)]),
    ("StatefulPartitionedCall", {"Tout": GenericList(None, ())}, 0, []),
    ("NoOp", {}, 0, []), ("AssignVariableOp", {"dtype": F32}, 0, []),
    ("ResourceApplyAdam", {"T": F32}, 0, []), ("ResourceSparseApplyAdagrad", {"T": F32}, 0, []),
    ("RandomStandardNormal", {"T": I32, "dtype": F32}, 0, [(np.float32, None)]),  # dtype first
    ("SomeCustomOp", {"T": I64}, 0, [(np.int64, None)]),
    ("SomeCustomOp", {"Tout": GenericList("type", [F32, I32])}, 0, [(np.float32, None), (np.int32, None)]),
    ("SomeCustomOp", {}, 2, [(None, None), (None, None)]),
    ("Relu", {"T": F32}, 3, [(np.float32, None), (None, None), (None, None)]),  # refs win
    ("Relu", {"T": F32, "_output_shapes": GenericList("shape", [GenericShape([1, None])])}, 0,
     [(np.float32, [1, None])]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_infer_outputs(op_type, attr, n_ref, expected):
    assert infer_outputs(op_type, attr, n_ref) == expected


def test_recorded_output_shapes_attr_value(tf):
    from tensorflow.core.framework import attr_value_pb2
    shapes = attr_value_pb2.AttrValue()
    shapes.list.shape.add().dim.add().size = 7
    shapes.list.shape.add().unknown_rank = True
    assert infer_outputs("Foo", {"_output_shapes": shapes}, 0) == [(None, [7]), (None, None)]


def test_shape_lists_are_fresh():
    attr = {"dtype": F32, "shape": GenericShape([3])}
    first = infer_outputs("Placeholder", attr, 0)
    first[0][1].append(9)
    assert infer_outputs("Placeholder", attr, 0) == [(np.float32, [3])]
