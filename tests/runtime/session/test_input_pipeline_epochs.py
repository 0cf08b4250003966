"""A script that counts AutoDist 0.7's steps per epoch (len(data) // batch) gets an OutOfRangeError that says why.

AutoDist copied the iterator into every replica, so each replayed the whole
dataset; here a node's replicas share one iterator and draw distinct batches
(tests/runtime/session/test_input_pipeline.py), so an epoch has fewer steps.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.strategies import AllReduce

EXAMPLES, BATCH = 32, 4


def _graph():
    dataset = tf.data.Dataset.from_tensor_slices(np.arange(EXAMPLES, dtype=np.float32).reshape(EXAMPLES, 1))
    x = tf.compat.v1.data.make_one_shot_iterator(dataset.batch(BATCH)).get_next()
    w = tf.Variable(tf.zeros([1, 1]), name="w")
    return tf.compat.v1.train.GradientDescentOptimizer(0.001).minimize(tf.reduce_mean(tf.square(x @ w - 1.0)))


def test_tf_data_iterator_epoch_end_explains_the_shared_iterator(spec):
    ad = AutoDist(spec, AllReduce())      # one node, two CPU replicas
    with tf.Graph().as_default(), ad.scope():
        train = _graph()
        session = ad.create_distributed_session()
        done = 0
        with pytest.raises(tf.errors.OutOfRangeError) as info:   # still the same type: loops catching it work
            for _ in range(EXAMPLES // BATCH):                     # AutoDist's examples count steps like this
                session.run(train)
                done += 1
    assert done == EXAMPLES // (2 * BATCH)                         # step 5 of 8 fails
    message = str(info.value)
    assert "2 replicas draw different batches" in message and "N // (2 * batch_size)" in message
    assert "docs/input_pipelines.md" in message


def test_out_of_range_without_an_iterator_is_unchanged(spec):
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        queue = tf.queue.FIFOQueue(1, tf.float32, shapes=[[]])
        w = tf.Variable(1.0, name="w")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(tf.square(w - queue.dequeue()))
        close = queue.close()
        session = ad.create_distributed_session()
        session.run(close)
        with pytest.raises(tf.errors.OutOfRangeError) as info:
            session.run(train)
    assert "[autodist]" not in str(info.value)
