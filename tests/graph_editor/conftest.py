"""Shared helpers for the graph_editor tests: small graphs and a way to run them.

Every numeric check opens a new Session, because a Session that already ran a
graph does not see later in-place edits.
"""
import pytest
import tensorflow as tf


def _config():
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                      inter_op_parallelism_threads=1)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


@pytest.fixture
def run():
    """run(graph, fetches, feed_dict=None, init=False) -> results from a fresh Session."""

    def _run(graph, fetches, feed_dict=None, init=False):
        with tf.compat.v1.Session(graph=graph, config=_config()) as sess:
            if init:
                with graph.as_default():
                    sess.run(tf.compat.v1.global_variables_initializer())
            return sess.run(fetches, feed_dict)

    return _run


@pytest.fixture
def chain():
    """x -> f/a = x + one -> f/b = a**2 -> f/c = -b; x a float placeholder, one = 1."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        one = tf.constant(1.0, name="one")
        with tf.name_scope("f"):
            a = tf.add(x, one, name="a")
            b = tf.square(a, name="b")
            c = tf.negative(b, name="c")
    return graph, x, a, b, c
