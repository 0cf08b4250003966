"""A GraphItem's fingerprint: equal for what the processes of one job may differ in, the first difference named.

The processes of a job run the same script, so their graphs are the same up to what each reads (its data,
files, seeds), the initial values (the chief's reach every node) and what TensorFlow numbers per process
(function names, custom gradients' names, a lookup table's random shared name). Every case builds the graph twice in this process,
with the counters advanced in between.
"""
import pytest
import tensorflow as tf

from autodist.capture.fingerprint import check_same_graph, fingerprint, first_difference
from autodist.capture.graph_item import GraphItem
from autodist.capture.optimizers import capture_optimizers
from autodist.errors import GraphMismatchError

tf1 = tf.compat.v1


@tf.custom_gradient
def _halved_gradient(v):
    return tf.identity(v), lambda dy: dy * 0.5


def _item(lr=0.1, width=3, rows=4, seed=None, scale=2.0, optimizer="sgd", rate=0.5, files=("a.txt",),
          extra=False, start=(0.5, -0.3)):
    graph = tf.Graph()
    item = GraphItem(graph)
    with graph.as_default(), item.as_default(), capture_optimizers():
        if seed is not None:
            tf1.set_random_seed(seed)
        x = tf1.placeholder(tf.float32, [None, width])
        data = tf.data.Dataset.from_tensor_slices(tf.ones([rows, width])).batch(2)   # this node's rows
        names = tf.data.Dataset.from_tensor_slices(list(files))                         # this node's files
        batch = tf1.data.make_one_shot_iterator(data).get_next()
        name = tf1.data.make_one_shot_iterator(names).get_next()
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(["a"], [1.0]), 0.0)
        w = tf1.get_variable("w", [width, 1], initializer=tf1.glorot_uniform_initializer())
        b = tf.Variable(list(start), name="b")   # an unseeded model's initial values, as constants
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w))) + tf.reduce_sum(tf.nn.dropout(batch, rate=rate))
        loss += tf.reduce_sum(b)
        loss += table.lookup(tf.strings.substr(name, 0, 1)) * 0.0
        loss += tf.function(lambda v: tf.reduce_sum(v * scale))(w)
        loss += tf.reduce_sum(_halved_gradient(w))   # registered as "CustomGradient-<a process counter>"
        _, power = tf.while_loop(lambda i, p: i < 3, lambda i, p: (i + 1, p * tf.reduce_sum(w)),
                                 [tf.constant(0), tf.constant(1.0)])   # the cond's unused p: an argument named
        loss += power                                                 # "while_cond_<counter>___redundant_placeholder0"
        if extra:
            loss += tf.reduce_sum(tf.identity(w, name="extra"))
        step = tf1.train.get_or_create_global_step()
        made = {"sgd": lambda: tf1.train.GradientDescentOptimizer(lr), "momentum": lambda: tf1.train.MomentumOptimizer(
            lr, momentum=0.9)}[optimizer]()
        made.minimize(loss, global_step=step)
        item.info.update_variables(tf1.global_variables())
    for _ in range(3):   # another process may have traced other functions first: their counters differ
        tf.function(lambda v: v + 1.0)(tf.constant(1.0))
    return item


def test_what_the_processes_of_a_job_may_differ_in_leaves_the_fingerprint_alone():
    chief = fingerprint(_item())
    assert first_difference(chief, fingerprint(_item(rows=6, seed=7, files=("b.txt", "c.txt"), start=(1.0, 2.0)))) \
        is None   # the initial values are the chief's on every node (broadcast)


@pytest.mark.parametrize("change, says", [
    (dict(lr=0.5), "the optimizer GradientDescentOptimizer's learning_rate: 0.1 on the chief, 0.5 here"),
    (dict(optimizer="momentum"), "the optimizer is GradientDescentOptimizer on the chief and MomentumOptimizer here"),
    (dict(width=4), "variable 'w' is float32[3, 1] trainable on the chief, float32[4, 1] trainable here"),
    (dict(rate=0.25), "op 'dropout/"),
    (dict(extra=True), "op 'extra/ReadVariableOp' is in this process's graph, not in the chief's"),
    (dict(scale=3.0), "function '__forward_<lambda>' differs from the chief's (its body)"),
], ids=["learning-rate", "optimizer", "variable-shape", "op-attribute", "extra-op", "function-body"])
def test_the_first_difference_is_named(change, says):
    difference = first_difference(fingerprint(_item()), fingerprint(_item(**change)))
    assert difference is not None and difference.startswith(says), difference


def test_a_mismatch_is_a_typed_error_naming_both_processes():
    with pytest.raises(GraphMismatchError, match=r"10\.0\.0\.2 captured another graph than the chief 10\.0\.0\.1: "
                                                 r"the optimizer GradientDescentOptimizer's learning_rate"):
        check_same_graph(fingerprint(_item()), fingerprint(_item(lr=0.3)), "10.0.0.2", "10.0.0.1")


def test_a_functions_ops_made_in_another_order_are_the_same_function():
    """while_v2's gradient makes its accumulators in an order that differs between processes: the same ops in
    another order, returned as other results ("add_grad/PopBack" as result 0 on one process, 1 on another)."""
    from tensorflow.core.framework import function_pb2
    from autodist.capture.fingerprint import _normal_function

    def body(order):
        function = function_pb2.FunctionDef()
        function.signature.name = "while_body_grad_17"
        for arg in ("placeholder_12", "placeholder_13"):
            function.signature.input_arg.add(name=arg, type=tf.variant.as_datatype_enum)
        for i, (scope, source, dtype) in enumerate(order):
            node = function.node_def.add(name="{}_grad/PopBack".format(scope), op="TensorListPopBack")
            node.input.append(source)
            node.attr["element_dtype"].type = dtype.as_datatype_enum
            function.ret["out_{}".format(i)] = "{}_grad/PopBack:output_handle:0".format(scope)
        return function
    first = body([("Add", "placeholder_12", tf.float32), ("add", "placeholder_13", tf.int32)])
    again = body([("add", "placeholder_13", tf.int32), ("Add", "placeholder_12", tf.float32)])
    assert _normal_function(first, set()) == _normal_function(again, set())
    other = body([("Add", "placeholder_12", tf.float32), ("add", "placeholder_13", tf.float32)])
    assert _normal_function(first, set()) != _normal_function(other, set())   # another dtype: still told apart
