"""AttrValue <-> generic values: every AttrValue kind round-trips; tensors decode like TF does."""
import numpy as np
import pytest

from autodist.ir.converters import (
    convert_op_attr, decode_tensor_proto, from_attr_value, is_private_key, read_attr_map,
    tensor_to_proto, to_attr_value, write_op_attr,
)
from autodist.ir.generic import (
    GenericDType, GenericFunc, GenericList, GenericPlaceholder, GenericShape, GenericTensor,
)


@pytest.fixture(scope="module")
def pb(tf):
    from tensorflow.core.framework import attr_value_pb2, node_def_pb2, tensor_pb2
    return attr_value_pb2, node_def_pb2, tensor_pb2


def _attr(pb, text):
    from google.protobuf import text_format
    return text_format.Parse(text, pb[0].AttrValue())


@pytest.mark.parametrize("text, expected", [
    ('s: "SAME"', "SAME"), (r's: "\377\000"', b"\xff\x00"), ("i: -7", -7), ("f: 0.25", 0.25),
    ("b: true", True), ("type: DT_HALF", GenericDType.from_name("float16")),
    ("type: DT_FLOAT_REF", GenericDType(101)),
    ("shape { dim { size: -1 } dim { size: 3 } }", GenericShape([None, 3])),
    ("shape { unknown_rank: true }", GenericShape(None)), ("shape { }", GenericShape([])),
    ('shape { dim { size: 2 name: "batch" } }', GenericShape([2], ["batch"])),
    ('func { name: "body" attr { key: "T" value { type: DT_INT32 } } }',
     GenericFunc("body", {"T": np.int32})),
    ('placeholder: "T"', GenericPlaceholder("T")),
    ("list { }", GenericList(None, ())), ("list { i: 1 i: 2 }", GenericList("i", [1, 2])),
    ('list { s: "a" s: "\\377" }', GenericList("s", ["a", b"\xff"])),
    ("list { f: 1.5 }", GenericList("f", [1.5])), ("list { b: false }", GenericList("b", [False])),
    ("list { type: DT_FLOAT type: DT_RESOURCE }", GenericList("type", [GenericDType(1), GenericDType(20)])),
    ("list { shape { dim { size: 1 } } shape { unknown_rank: true } }",
     GenericList("shape", [GenericShape([1]), GenericShape(None)])),
    ('list { func { name: "f" } }', GenericList("func", [GenericFunc("f")])),
    ("", None),
], ids=lambda v: v if isinstance(v, str) else "")
def test_every_attr_kind_round_trips(pb, text, expected):
    original = _attr(pb, text)
    value = from_attr_value(original)
    assert value == expected and type(value) is type(expected)
    rebuilt = to_attr_value(value, pb[0].AttrValue())
    assert rebuilt == original and rebuilt.WhichOneof("value") == original.WhichOneof("value")


def test_empty_list_keeps_being_a_list(pb):
    rebuilt = to_attr_value(GenericList("type", ()), pb[0].AttrValue())
    assert rebuilt.WhichOneof("value") == "list" and len(rebuilt.list.type) == 0


def test_tensor_attrs_are_written_back_as_read(pb, tf):
    attr = pb[0].AttrValue()
    attr.tensor.CopyFrom(tf.make_tensor_proto(np.arange(4, dtype=np.float32)))
    attr.tensor.version_number = 3  # a field the IR does not model
    value = from_attr_value(attr)
    assert value.is_opaque and to_attr_value(value, pb[0].AttrValue()) == attr


CASES = [
    np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5, -0.0, np.inf], np.float64),
    np.array([[1, -2]], np.int32), np.array([200, 3], np.uint8), np.array([-3], np.int16),
    np.array([-8, 7], np.int8), np.array([2**40, -1], np.int64), np.array([True, False]),
    np.array([1 + 2j, 3j], np.complex64), np.array([1 - 1j], np.complex128),
    np.array([0.5, -2], np.float16), np.array([2**31 + 5], np.uint32),
    np.array([2**63 + 1], np.uint64), np.array([60000], np.uint16),
    np.array([b"ab", b"\xff"], dtype=object), np.zeros((0, 3), np.float32),
    np.full((3, 2), 7, np.int32), np.array(4.0, np.float32), np.array([0.0, -0.0], np.float32),
]


@pytest.mark.parametrize("array", CASES, ids=lambda a: "{}{}".format(a.dtype, list(a.shape)))
def test_tensors_decode_as_tensorflow_does(pb, tf, array):
    proto = tf.make_tensor_proto(array)
    decoded = decode_tensor_proto(proto)
    expected = tf.make_ndarray(proto)
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    assert decoded.tolist() == expected.tolist()
    if decoded.dtype != object:
        assert decoded.tobytes() == expected.tobytes()


@pytest.mark.parametrize("array", CASES, ids=lambda a: "{}{}".format(a.dtype, list(a.shape)))
def test_tensors_built_from_values_encode_for_tensorflow(pb, tf, array):
    proto = tensor_to_proto(GenericTensor(array), pb[2].TensorProto())
    back = tf.make_ndarray(proto)
    assert back.shape == array.shape and back.tolist() == array.tolist()
    if array.dtype != object:
        assert back.tobytes() == array.tobytes()  # -0.0 stays -0.0
    again = tensor_to_proto(GenericTensor(decode_tensor_proto(proto), GenericDType(proto.dtype)),
                            pb[2].TensorProto())
    assert again == proto  # the canonical encoding is a fixed point


def test_splat_and_missing_values_follow_tensorflow(pb, tf):
    splat = pb[2].TensorProto(dtype=1, float_val=[1.0, 2.0])
    splat.tensor_shape.dim.add().size = 4
    np.testing.assert_array_equal(decode_tensor_proto(splat), tf.make_ndarray(splat))
    empty = pb[2].TensorProto(dtype=3)
    empty.tensor_shape.dim.add().size = 2
    np.testing.assert_array_equal(decode_tensor_proto(empty), [0, 0])
    constant = tensor_to_proto(GenericTensor(np.full(1000, 2.5, np.float32)), pb[2].TensorProto())
    assert list(constant.float_val) == [2.5] and not constant.tensor_content


def test_malformed_tensor_content_is_an_error(pb):
    proto = pb[2].TensorProto(dtype=1, tensor_content=b"\x00" * 6)
    proto.tensor_shape.dim.add().size = 2
    with pytest.raises(ValueError, match="6 content bytes for 2 elements"):
        decode_tensor_proto(proto)


@pytest.mark.parametrize("key, private", [
    ("_class", True), ("_output_shapes", True), ("_", True), ("__x", False), ("T", False),
    ("x_", False), ("", False)])
def test_private_keys_start_with_a_single_underscore(key, private):
    assert is_private_key(key) is private


def test_read_attr_map_copies_private_messages(pb):
    node = pb[1].NodeDef(name="n")
    node.attr["_class"].list.s.append(b"loc:@w")
    node.attr["T"].type = 1
    attr = read_attr_map(node.attr, "n")
    assert attr["T"] == GenericDType(1) and attr["_class"] == node.attr["_class"]
    node.attr["_class"].list.s.append(b"loc:@v")
    assert list(attr["_class"].list.s) == [b"loc:@w"]


def test_write_op_attr_private_values(pb):
    node = pb[1].NodeDef()
    private = pb[0].AttrValue(s=b"keep")
    write_op_attr({"_msg": private, "_generic": 3, "_python_only": object(), "N": 2},
                  node.attr, "op 'n'")
    assert node.attr["_msg"] == private and node.attr["_generic"].i == 3 and node.attr["N"].i == 2
    assert "_python_only" not in node.attr  # IR-only metadata


def test_write_op_attr_copies_messages_of_another_class(pb):
    class Wire:  # a stand-in with another class but the same wire format
        def __init__(self, msg):
            self.msg = msg

        def WhichOneof(self, name):
            return self.msg.WhichOneof(name)

        def SerializeToString(self):
            return self.msg.SerializeToString()

    node = pb[1].NodeDef()
    write_op_attr({"_v": Wire(pb[0].AttrValue(i=5))}, node.attr, "op 'n'")
    assert node.attr["_v"].i == 5


def test_errors_name_the_op_and_key(pb):
    node = pb[1].NodeDef()
    with pytest.raises(ValueError, match="op 'n': attr 'big'"):
        write_op_attr({"big": 2**70}, node.attr, "op 'n'")
    with pytest.raises(TypeError, match="node 'x': attr 'k'"):
        convert_op_attr({"k": object()}, "node 'x'")
    with pytest.raises(TypeError, match="attr key 3"):
        convert_op_attr({3: 1}, "node 'x'")
