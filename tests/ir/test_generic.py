"""Generic attr values: immutable, validated, comparable; to_generic normalization."""
import copy

import numpy as np
import pytest

from autodist.ir.generic import (
    GenericDType, GenericFunc, GenericList, GenericPlaceholder, GenericShape, GenericTensor,
    to_generic,
)
from autodist.ir.generic import _UNDECODED


def test_shape():
    shape = GenericShape([2, -1, None])
    assert shape.dims == (2, None, None) and shape.rank == 3 and shape.as_list() == [2, None, None]
    assert not shape.is_fully_defined and shape.num_elements() is None
    assert GenericShape([2, 3]).num_elements() == 6 and GenericShape([]).num_elements() == 1
    unknown = GenericShape(None)
    assert unknown.rank is None and unknown.as_list() is None and not unknown.is_fully_defined
    assert GenericShape([1, 2], ["", ""]).names is None  # empty names are no names
    assert GenericShape([1], ["batch"]) != GenericShape([1])
    assert GenericShape(GenericShape([3])) == GenericShape([3])
    for bad, error in (([1.0], TypeError), ([-2], ValueError), ([True], TypeError)):
        with pytest.raises(error):
            GenericShape(bad)
    with pytest.raises(ValueError, match="dim names"):
        GenericShape([1], ["a", "b"])


def test_tensor_from_values():
    tensor = GenericTensor([[1, 2], [3, 4]], np.int32)
    assert tensor.dtype == GenericDType.from_name("int32") and tensor.shape == (2, 2)
    assert tensor.array.dtype == np.int32 and not tensor.array.flags.writeable
    assert tensor == GenericTensor(np.array([[1, 2], [3, 4]], np.int32)) and tensor.proto is None
    assert tensor != GenericTensor([[1, 2], [3, 5]], np.int32)
    assert GenericTensor([np.nan], np.float32) == GenericTensor([np.nan], np.float32)  # bitwise
    assert GenericTensor([b"a"]) == GenericTensor(np.array([b"a"], dtype=object))
    assert GenericTensor(np.zeros(2, np.int8), GenericDType.from_name("qint8")).array.dtype == np.int8
    with pytest.raises(TypeError, match="bfloat16"):
        GenericTensor([1.0], GenericDType.from_name("bfloat16"))
    with pytest.raises(TypeError, match="not a data type"):
        GenericTensor([1.0], "float32")


def test_generic_tensor_from_proto_decodes_lazily_and_keeps_its_own_copy(tf):
    proto = tf.make_tensor_proto(np.arange(6, dtype=np.float32).reshape(2, 3))
    tensor = GenericTensor.from_proto(proto)
    assert tensor._array is _UNDECODED and tensor.shape == (2, 3)
    proto.tensor_shape.dim[0].size = 99
    assert tensor.proto.tensor_shape.dim[0].size == 2
    np.testing.assert_array_equal(tensor.array, np.arange(6).reshape(2, 3))
    assert tensor == GenericTensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    bf16 = GenericTensor.from_proto(tf.make_tensor_proto([1.0, 2.0], dtype=tf.bfloat16))
    assert bf16.is_opaque and bf16.array is None and bf16.shape == (2,)
    assert bf16 == GenericTensor.from_proto(tf.make_tensor_proto([1.0, 2.0], dtype=tf.bfloat16))
    assert "opaque bfloat16" in repr(bf16)


def test_func_list_placeholder():
    func = GenericFunc("body", {"T": np.float32, "n": 2})
    assert func.attr == {"T": GenericDType(1), "n": 2} and func == GenericFunc("body", func.attr)
    assert GenericList("i", [1, 2]) == GenericList("i", (1, 2)) and len(GenericList("f", [1])) == 1
    assert GenericList("f", [1]).values == (1.0,) and GenericList("type", [np.int32])[0].enum == 3
    assert GenericList(None, ()) == GenericList("type", ()) == GenericList("shape", [])
    assert GenericList("s", ["a", b"b"]).values == ("a", b"b")
    assert GenericPlaceholder("T") == GenericPlaceholder("T") != GenericPlaceholder("U")
    for kind, values, error in (("i", [True], TypeError), ("b", [1], TypeError),
                                ("x", [], ValueError), (None, [1], ValueError),
                                ("s", [1], TypeError), ("shape", [3], TypeError)):
        with pytest.raises(error):
            GenericList(kind, values)
    with pytest.raises(TypeError):
        GenericFunc(3)


@pytest.mark.parametrize("value, expected", [
    (np.float32, GenericDType(1)), (np.dtype("int64"), GenericDType(9)),
    (np.int64(3), 3), (np.float64(0.5), 0.5), (np.bool_(False), False), (np.str_("s"), "s"),
    ([1, 2], GenericList("i", [1, 2])), ([1, 2.5], GenericList("f", [1.0, 2.5])),
    (["a", b"b"], GenericList("s", ["a", b"b"])), ([True], GenericList("b", [True])),
    ((np.float32, np.int32), GenericList("type", [GenericDType(1), GenericDType(3)])),
    ([GenericShape([1])], GenericList("shape", [GenericShape([1])])),
    (None, None), ("text", "text"), (b"\xff", b"\xff"),
], ids=lambda v: repr(v)[:30])
def test_to_generic(value, expected):
    result = to_generic(value)
    assert result == expected and type(result) is type(expected)


def test_to_generic_tf_dtype_and_arrays(tf):
    assert to_generic(tf.float16) == GenericDType.from_name("float16")
    assert to_generic(np.ones(2, np.float32)) == GenericTensor(np.ones(2, np.float32))


@pytest.mark.parametrize("value", [[], [1, "a"], {"a": 1}, object(), [[1]]],
                         ids=["empty", "mixed", "dict", "object", "nested"])
def test_to_generic_refuses(value):
    with pytest.raises(TypeError):
        to_generic(value)


def test_values_are_immutable_and_copy_to_themselves():
    for value in (GenericShape([1]), GenericTensor([1]), GenericFunc("f"), GenericList("i", [1]),
                  GenericPlaceholder("T")):
        with pytest.raises(AttributeError):
            value.name = "x"
        assert copy.copy(value) is value and copy.deepcopy(value) is value
        assert hash(value) == hash(value) and repr(value)


def test_values_pickle(tf):
    import pickle
    proto_backed = GenericTensor.from_proto(tf.make_tensor_proto(np.arange(3, dtype=np.int64)))
    for value in (GenericShape([1, None], ["a", ""]), GenericTensor([1.5]), proto_backed,
                  GenericFunc("f", {"T": np.float32}), GenericList("type", [np.int32]),
                  GenericPlaceholder("T"), GenericDType(101)):
        assert pickle.loads(pickle.dumps(value)) == value
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(proto_backed)).array, [0, 1, 2])
