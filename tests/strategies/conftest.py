"""Fixtures of the strategy tests: small captured graphs and resource specs.

Graphs are built with TensorFlow (imported lazily, only by the fixtures that
need it); most builder tests use synthetic ``BuilderVariable`` lists instead.
"""
import pytest

from strategy_inputs_for_tests import _spec_from, _var


@pytest.fixture
def one_cpu():
    return _spec_from([("127.0.0.1", (), (0,))])


@pytest.fixture
def two_gpus():
    return _spec_from([("127.0.0.1", (0, 1), (0,))])


@pytest.fixture
def two_nodes():
    """10.0.0.2 (chief, listed first, 2 GPUs) and 10.0.0.1 (CPU only, CPU:0 and CPU:1)."""
    return _spec_from([("10.0.0.2", (0, 1), (0,)), ("10.0.0.1", (), (0, 1))])


@pytest.fixture
def four_servers():
    return _spec_from([("10.0.0.{}".format(i), (0,), (0,)) for i in range(1, 5)])


def _build_graph_item(emb_rows=10, dense_in=4):
    """A captured graph: dense W [dense_in, 3], b [3], sparse emb [emb_rows, 4] (tf.gather),
    loop_w [3, 3] read inside a while loop, and frozen [2] (trainable, no gradient)."""
    import tensorflow as tf
    from autodist.capture.optimizers import capture_optimizers
    from autodist.capture.graph_item import GraphItem

    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            x = tf1.placeholder(tf.float32, [None, dense_in], name="x")
            ids = tf1.placeholder(tf.int32, [None], name="ids")
            w = tf1.get_variable("W", initializer=tf.zeros([dense_in, 3]))
            b = tf1.get_variable("b", initializer=tf.zeros([3]))
            emb = tf1.get_variable("emb", initializer=tf.zeros([emb_rows, 4]))
            loop_w = tf1.get_variable("loop_w", initializer=tf.ones([3, 3]))
            tf1.get_variable("frozen", initializer=tf.zeros([2]))
            _, looped = tf.while_loop(lambda i, acc: i < 3,
                                      lambda i, acc: (i + 1, acc + tf.reduce_sum(loop_w)),
                                      [tf.constant(0), tf.constant(0.0)])
            loss = (tf.reduce_sum(tf.matmul(x, w) + b) + tf.reduce_sum(tf.gather(emb, ids))
                    + looped)
            variables = [w, b, emb, loop_w]
            grads = tf.gradients(loss, variables)
            tf1.train.GradientDescentOptimizer(0.1).apply_gradients(zip(grads, variables))
        item.prepare()
    return item


@pytest.fixture(scope="module")
def graph_item():
    return _build_graph_item()


@pytest.fixture
def make_var():
    """``make_var(name, shape, sparse=..., control_flow=...)`` -> BuilderVariable."""
    return _var


@pytest.fixture
def make_spec():
    """``make_spec([(address, gpus, cpus), ...])`` -> ResourceSpec."""
    return _spec_from


@pytest.fixture(scope="module")
def make_graph_item():
    """``make_graph_item(emb_rows=10, dense_in=4)`` -> a captured GraphItem."""
    return _build_graph_item
