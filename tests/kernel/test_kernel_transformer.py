"""GraphTransformer and run_passes: GraphItem -> PassResult passes, inputs untouched, failures named."""
import numpy as np
import pytest
import tensorflow as tf

from autodist.errors import SessionError, StrategyError, TransformError
from autodist.capture.graph_item import GraphItem
from autodist.kernel.analysis import analyze
from autodist.kernel.assignment import assign
from autodist.kernel.base import PassResult
from autodist.plan.contract import read_entries
from autodist.kernel.finalizer import Finalizer
from autodist.kernel.graph_transformer import GraphTransformer, TransformResult, run_passes
from autodist.kernel.partitioner import Partitioner
from autodist.kernel.replicator import Replicator
from autodist.kernel.synchronization import SyncBetweenGraph, SyncInGraph
from kernel_harness import capture, device, make_strategy, node_context, tf1, transform

T0C0, T0C1 = device(0, 0), device(0, 1)


def _model():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    w = tf1.get_variable("W", initializer=tf.ones([4, 2]))
    b = tf1.get_variable("b", initializer=tf.zeros([2]))
    loss = tf.reduce_sum(tf.matmul(x, w) + b)
    return {"train": tf1.train.MomentumOptimizer(0.1, 0.9).minimize(loss), "W": w}


def _strategy(partition=True):
    return make_strategy([T0C0, T0C1], ps={"W": dict(device=T0C0)}, ar={"b": {}},
                         partitions={"W": ("2,1", [])} if partition else None)


def _fingerprint(item):
    """What a pass must leave alone (without importing a GraphDef-backed item's graph)."""
    return (item.graph_def.SerializeToString(deterministic=True),
            [v.SerializeToString() for v in item.info.variables], [tuple(vars(r).values()) for r in item.grad_records],
            item.train_op_names)


def test_transform_result_and_untouched_input():
    item, _ = capture(_model)
    before = _fingerprint(item)
    result = GraphTransformer(_strategy(), node_context()).transform(item)
    assert isinstance(result, TransformResult)
    assert _fingerprint(item) == before
    assert result.original is item and result.partitioned is not item
    assert set(result.partitions) == {"W"} and result.assignment.vars.keys() == {"W/part_0", "W/part_1", "b"}
    assert isinstance(result.item, GraphItem)
    names = {n.name for n in result.item.graph_def.node}
    assert {"W/part_0", "AutoDist-Replica-1/b", "AutoDist-Init/servers"} <= names


def test_no_partition_no_new_item():
    item, _ = capture(_model)
    result = transform(item, _strategy(partition=False))
    assert result.partitioned is item and result.partitions == {}


def test_every_pass_returns_a_new_item_and_leaves_its_input_alone():
    item, _ = capture(_model)
    strategy = _strategy()
    partitioned = Partitioner(read_entries(strategy))(item).item
    assignment = assign(analyze(partitioned), read_entries(strategy), node_context())
    current = partitioned
    for make in (Replicator, SyncInGraph, SyncBetweenGraph, Finalizer):
        before = _fingerprint(current)
        result = make(assignment)(current)
        assert isinstance(result, PassResult)
        out = result.item
        assert isinstance(out, GraphItem) and out is not current
        assert _fingerprint(current) == before, make.name
        current = out


def _named(name, fn):
    fn.name = name
    return fn


def test_run_passes_collects_each_passs_details_in_order():
    item = GraphItem()
    found = _named("found", lambda i: PassResult(i, {"W": "split"}))
    plain = _named("plain", lambda i: i)
    result = run_passes(item, [found, plain])
    assert isinstance(result, PassResult) and result.item is item
    assert list(result.details.items()) == [("found", {"W": "split"}), ("plain", None)]


def test_run_passes_names_the_failing_pass_and_those_before_it():
    fine = _named("fine", lambda item: item)

    def broken(item):
        raise ValueError("something inside went wrong")
    broken.name = "broken-pass"
    with pytest.raises(TransformError) as error:
        run_passes(GraphItem(), [fine, broken, fine], done=["earlier"])
    assert error.value.pass_name == "broken-pass"
    assert error.value.passes_done == ("earlier", "fine")
    assert str(error.value).startswith("pass 'broken-pass' (after earlier, fine): ValueError: something inside")


def test_run_passes_keeps_the_variable_and_op_of_a_transform_error():
    def failing(item):
        raise TransformError("cannot do it", variable="W", op="W/read")
    failing.name = "failing"
    with pytest.raises(TransformError) as error:
        run_passes(GraphItem(), [failing])
    assert (error.value.pass_name, error.value.variable, error.value.op) == ("failing", "W", "W/read")
    assert str(error.value) == "pass 'failing', variable 'W', op 'W/read': cannot do it"

    def named(item):
        raise TransformError("already named", pass_name="inner")
    with pytest.raises(TransformError) as error:
        run_passes(GraphItem(), [named])
    assert error.value.pass_name == "inner"

    def user_error(item):
        raise SessionError("not a pass failure")
    with pytest.raises(SessionError):
        run_passes(GraphItem(), [user_error])


def test_a_function_pass_is_named_by_its_function_name():
    def my_pass(item):
        raise ValueError("boom")
    with pytest.raises(TransformError, match="pass 'my_pass'"):
        run_passes(GraphItem(), [my_pass])


def test_a_pass_that_names_itself_still_lists_the_passes_before_it():
    def model():
        built = _model()
        tf.Variable(tf.random.uniform([3]), shape=tf.TensorShape(None), name="shapeless", trainable=False)
        return built
    item, _ = capture(model)
    with pytest.raises(TransformError) as error:
        transform(item, _strategy(partition=False))
    assert error.value.passes_done == ("partition", "replicate", "sync_in_graph", "sync_between_graph")


def test_a_failing_pass_names_itself_the_variable_and_the_op():
    def model():
        built = _model()
        tf.raw_ops.ResourceScatterAdd(resource=built["W"].handle, indices=[0], updates=tf.ones([1, 2]),
                                      name="user_scatter")
        return built
    item, _ = capture(model)
    with pytest.raises(TransformError) as error:
        transform(item, _strategy())
    message = str(error.value)
    assert "pass 'partition'" in message and "variable 'W'" in message and "op 'user_scatter'" in message


def test_assignment_and_late_failures_name_the_pass_and_the_variable():
    item, _ = capture(_model)
    strategy = make_strategy([T0C0], ps={"W": dict(device=T0C0)}, partitions={"W": ("2,1", [])})
    with pytest.raises(TransformError) as error:
        transform(item, strategy)
    assert str(error.value).startswith("pass 'assign'")
    assert error.value.variable == "b" and "has a gradient but no entry in the strategy" in str(error.value)

    def model():
        built = _model()
        tf.Variable(tf.random.uniform([3]), shape=tf.TensorShape(None), name="shapeless", trainable=False)
        return built
    item, _ = capture(model)
    with pytest.raises(TransformError) as error:
        transform(item, _strategy(partition=False))
    assert (error.value.pass_name, error.value.variable) == ("finalize", "shapeless")
    assert "has no fully defined shape" in str(error.value)


def test_the_transformed_graph_runs(cluster):
    item, _ = capture(_model)
    node = cluster(1).open(transform(item, _strategy()))
    x = np.ones([4, 4], np.float32)
    node.train_global({"x:0": x})
    # the mean of the replicas' gradients, each a sum over its two rows
    for shard in ("W/part_0", "W/part_1"):
        np.testing.assert_allclose(node.read(shard), np.full([2, 2], 1.0 - 0.1 * 2), rtol=1e-6)
    np.testing.assert_allclose(node.read("AutoDist-Replica-1/b"), np.full([2], -0.1 * 2), rtol=1e-6)


def test_the_transformer_reads_the_strategy_first():
    def build():
        w = tf1.get_variable("W", initializer=tf1.ones([4, 2]))
        return tf1.train.GradientDescentOptimizer(0.1).minimize(tf1.reduce_sum(w))
    item, _ = capture(build)
    strategy = make_strategy([T0C0], ps={"W": dict(device=T0C0)}, partitions={"W": ("2,2", [])})
    with pytest.raises(StrategyError, match="variable 'W': partitioner '2,2' must split exactly one axis"):
        transform(item, strategy)



def test_the_declared_order_meets_every_passs_requirements():
    from autodist.kernel.base import Pass, check_order
    from autodist.kernel.graph_transformer import PIPELINE
    classes = [cls for cls, _ in PIPELINE]
    assert all(issubclass(cls, Pass) for cls in classes)
    assert [cls.name for cls in classes] == ["uneven_inputs", "loss_shares", "accumulate", "half_gradients", "partition",
                                             "assign", "replicate", "sync_in_graph", "sync_between_graph",
                                             "sync_statistics", "finalize"]
    check_order(classes)
    swapped = classes[:6] + [classes[7], classes[6]] + classes[8:]
    with pytest.raises(TransformError, match="pass 'sync_in_graph'.*needs 'replicate' to run before it"):
        check_order(swapped)


def test_the_assignment_is_a_step_that_rewrites_nothing_and_is_not_dumped():
    item, _ = capture(_model)
    dumped = []
    result = GraphTransformer(_strategy(), node_context(), observe=lambda name, _: dumped.append(name)).transform(item)
    assert dumped == ["partition", "replicate", "sync_in_graph", "sync_between_graph", "finalize"]
    assert result.assignment.vars.keys() == {"W/part_0", "W/part_1", "b"}
