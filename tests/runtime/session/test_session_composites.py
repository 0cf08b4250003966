"""Fetching and feeding IndexedSlices and SparseTensors through the distributed session, as a plain Session does.

A plain ``tf.compat.v1.Session`` expands these composites into their
components (and so did AutoDist); the distributed session maps each component
like a tensor: split along its unknown dimension when fed, concatenated over
the replicas when fetched.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.errors import SessionError
from autodist.strategies import PS, AllReduce

tf1 = tf.compat.v1
ROWS, DIM = 10, 3


def _graph():
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    table = tf1.get_variable("table", initializer=tf.reshape(tf.range(ROWS * DIM, dtype=tf.float32), [ROWS, DIM]))
    loss = tf.reduce_sum(tf.square(tf.gather(table, ids)))   # a sum: each replica's slices are the plain ones
    grad = tf.gradients(loss, [table])[0]
    train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
    sparse = tf1.sparse_placeholder(tf.float32, shape=[None, 4], name="sparse")
    fixed = tf.sparse.SparseTensor([[0, 1], [2, 3]], [1.0, 2.0], [3, 4])
    return dict(ids=ids, grad=grad, train=train, sparse=sparse, fixed=fixed, total=tf.sparse.reduce_sum(fixed))


def _plain(feed_ids, sparse_value):
    with tf.Graph().as_default() as graph:
        g = _graph()
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            return session.run([g["grad"], g["sparse"], g["fixed"]],
                               {g["ids"]: feed_ids, g["sparse"]: sparse_value})


@pytest.mark.parametrize("builder", [PS(), AllReduce()], ids=["PS", "AllReduce"])
def test_fetch_and_feed_indexed_slices_and_sparse_tensors(spec, builder):
    feed_ids = np.array([1, 4, 4, 7], dtype=np.int32)
    sparse_value = tf1.SparseTensorValue(indices=[[0, 0], [1, 2], [2, 1], [3, 3]], values=[1.0, 2.0, 3.0, 4.0],
                                         dense_shape=[4, 4])
    want_grad, want_sparse, want_fixed = _plain(feed_ids, sparse_value)
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        g = _graph()
        session = ad.create_distributed_session()
        grad, sparse, fixed = session.run([g["grad"], g["sparse"], g["fixed"]],
                                          {g["ids"]: feed_ids, g["sparse"]: sparse_value})
        assert type(grad).__name__ == "IndexedSlicesValue" and isinstance(sparse, tf1.SparseTensorValue)
        for got, want in ((grad, want_grad), (sparse, want_sparse), (fixed, want_fixed)):
            assert type(got) is type(want)
            for got_part, want_part in zip(got, want):
                np.testing.assert_allclose(got_part, want_part)
        by_tuple = session.run(g["sparse"], {g["sparse"]: tuple(sparse_value)})
        np.testing.assert_allclose(by_tuple.values, sparse_value.values)
        assert session.run({"total": g["total"], "fixed": g["fixed"]})["total"] == 3.0
        with pytest.raises(SessionError, match="SparseTensorValue"):
            session.run(g["sparse"], {g["sparse"]: np.zeros([2, 4])})
