"""TensorInfo: validation, null tensors, ownership (move_into), dangling detection, copies."""
import copy

import numpy as np
import pytest

from autodist.ir import IRGraph, OperationInfo, TensorInfo
from autodist.ir.dtypes import GenericDType


@pytest.fixture
def graph():
    ugraph = IRGraph(["a"])
    OperationInfo("a", [], [TensorInfo("a:0", "a", np.float32, [2, None], ugraph)], "Const",
                  ugraph=ugraph)
    return ugraph


def test_fields_and_normalization(graph):
    tensor = TensorInfo("a:0", "a", "float32", (2, -1, None), graph)
    assert tensor.name == "a:0" and tensor.op_name == "a" and tensor.index == 0
    assert tensor.dtype == np.dtype("float32") and isinstance(tensor.dtype, np.dtype)
    assert tensor.shape == [2, None, None]
    assert tensor.ugraph is graph and tensor.lib_name == "tensorflow"
    assert TensorInfo("a:3", "a", GenericDType.from_name("int64"), None, graph).dtype == np.int64
    assert TensorInfo("a:0", "a", None, None, graph).dtype is None  # unknown dtype


def test_op_is_looked_up_by_name(graph):
    tensor = TensorInfo("a:0", "a", np.float32, [], graph)
    assert tensor.op is graph.ops_info["a"]
    assert not tensor.is_dangling and not tensor.is_null_tensor


@pytest.mark.parametrize("args, error, message", [
    (("", "a", np.float32, []), TypeError, "non-empty str"),
    (("b:0", "a", np.float32, []), ValueError, "must be named 'a:<index>'"),
    (("a", "a", np.float32, []), ValueError, "must be named"),
    (("a:0", "a", "no-such-type", []), TypeError, "not a numpy dtype"),
    (("a:0", "a", np.float32, [1.5]), TypeError, "non-int dim"),
    (("a:0", "a", np.float32, [-3]), ValueError, "negative dim"),
    (("a:0", "a", np.float32, "ab"), TypeError, "list of ints"),
    (("a:0", 7, np.float32, []), TypeError, "op_name"),
], ids=["empty-name", "name-op-mismatch", "no-index", "bad-dtype", "float-dim", "negative-dim",
        "string-shape", "bad-op-name"])
def test_invalid_tensors_are_refused_naming_the_tensor(graph, args, error, message):
    with pytest.raises(error, match=message):
        TensorInfo(*args, graph)


def test_a_graph_is_required():
    with pytest.raises(TypeError, match="TensorInfo 'a:0': ugraph must be an IRGraph"):
        TensorInfo("a:0", "a", np.float32, [], None)


def test_null_tensors(graph):
    null = TensorInfo.make_null_tensor(graph)
    other = TensorInfo.make_null_tensor(graph, np.int32, [3])
    assert null.is_null_tensor and null.op is None and not null.is_dangling
    assert null.dtype == np.dtype("float") and null.shape is None  # the spec's defaults
    assert other.dtype == np.int32 and other.shape == [3]
    assert null.name != other.name and null.ugraph is graph
    with pytest.raises(TypeError):
        TensorInfo.make_null_tensor("graph")


def test_dangling_tensor_is_detected(graph):
    tensor = TensorInfo("ghost:0", "ghost", np.float32, [], graph)
    assert tensor.is_dangling
    with pytest.raises(ValueError, match="'ghost:0' is dangling"):
        tensor.op
    tensor.op_name, tensor.name = "a", "a:0"  # documented: these may be edited directly
    assert not tensor.is_dangling


def test_move_into_transfers_ownership(graph):
    other = IRGraph([])
    tensor = TensorInfo("a:0", "a", np.float32, [], graph)
    tensor.move_into(other)
    assert tensor.ugraph is other and tensor.is_dangling  # 'a' lives in the first graph
    with pytest.raises(TypeError, match="move_into"):
        tensor.move_into({})


def test_shallow_copy_is_refused_and_deep_copy_copies_the_graph(graph):
    tensor = graph.ops_info["a"].output_tensors[0]
    with pytest.raises(TypeError, match="shallow copy"):
        copy.copy(tensor)
    twin = copy.deepcopy(tensor)
    assert twin is not tensor and twin.name == "a:0" and twin.shape == [2, None]
    assert twin.ugraph is not graph and twin.op is twin.ugraph.ops_info["a"]
    assert twin.shape is not tensor.shape
