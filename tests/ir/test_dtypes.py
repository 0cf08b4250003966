"""GenericDType: the DataType table agrees with TensorFlow's; identity, names, numpy views."""
import numpy as np
import pytest

from autodist.ir.dtypes import GenericDType, numpy_dtype_of_enum


def test_table_matches_tensorflow(tf):
    from tensorflow.core.framework import types_pb2
    checked = 0
    for tf_name, enum in types_pb2.DataType.items():
        if enum == 0:
            continue
        ours = GenericDType(enum)
        assert ours.is_ref == tf_name.endswith("_REF")
        dtype = tf.dtypes.as_dtype(enum)
        assert ours.name == dtype.name, tf_name
        assert ours.itemsize in (None, dtype.size) and (ours.itemsize or 0) >= 0
        if ours.np_dtype is not None and ours.name not in ("resource", "variant", "string") \
                and not ours.name.startswith("q") and not ours.is_ref:
            assert ours.np_dtype == np.dtype(dtype.as_numpy_dtype), tf_name
            checked += 1
        elif ours.name.startswith("q"):  # TF's are structured dtypes; ours plain ints
            assert ours.np_dtype.itemsize == dtype.size and ours.np_dtype.kind in "iu"
    assert checked == 14


def test_identity_names_and_numpy_views():
    f32 = GenericDType(1)
    assert GenericDType(1) is f32 and GenericDType(np.int64(1)) is f32 and GenericDType(f32) is f32
    assert GenericDType.from_name("float") is f32 and GenericDType.from_numpy(np.float32) is f32
    ref = GenericDType.from_name("float32_ref")
    assert ref.enum == 101 and ref.is_ref and ref.base is f32 and ref.np_dtype == np.float32
    assert GenericDType.from_numpy(object).name == "string"
    assert GenericDType(20).np_dtype == np.dtype(object) and GenericDType(14).np_dtype is None
    assert GenericDType(999).name == "dtype_999" and numpy_dtype_of_enum(999) is None
    assert {f32: 1}[GenericDType(1)] == 1 and repr(f32) == "GenericDType('float32')"


@pytest.mark.parametrize("call, error", [
    (lambda: GenericDType(True), TypeError), (lambda: GenericDType("float32"), TypeError),
    (lambda: GenericDType(-1), ValueError), (lambda: GenericDType.from_name("float33"), ValueError),
    (lambda: GenericDType.from_numpy("datetime64[s]"), TypeError),
    (lambda: GenericDType.from_numpy("not a dtype"), TypeError),
], ids=["bool", "str", "negative", "bad-name", "no-tf-type", "not-numpy"])
def test_invalid(call, error):
    with pytest.raises(error):
        call()


def test_immutable():
    with pytest.raises(AttributeError):
        GenericDType(1)._enum = 2
