"""Gradient accumulation under asynchronous and stale parameter servers: each node applies its own updates.

The model's gradient does not depend on the weights (``loss = <mean of the replica's batch, W>``), so the
order in which the nodes' asynchronous updates reach the server does not matter: after every node's
``CALLS`` calls with ``K`` micro-steps an update, ``W = W0 - LR * sum over nodes and updates of the node's
mean gradient over the update's K micro-batches``, and a node's global step (an optimizer counter, one per
replica) counts its applied updates, ``CALLS / K``, not its calls. Each node waits, bounded, until the
server's ``W`` holds every node's updates (the other node may still be applying its last one), then reads.
"""
import time

import numpy as np

import eq_harness

K, CALLS, LR, SHAPE, BATCH = 2, 6, 0.5, (3, 4), 12   # BATCH: the equivalence tests' global batch
WAIT_S = 60.0


def batch(call):
    """The global batch of call ``call`` (every replica's rows, in replica order)."""
    return np.random.RandomState(100 + call).rand(BATCH, *SHAPE).astype(np.float32)


def expected(rows_of_nodes):
    """(W once every node's updates are applied, a node's global step); ``rows_of_nodes``: each node's rows."""
    w = np.zeros(SHAPE, np.float32)
    for rows in rows_of_nodes:
        for update in range(CALLS // K):
            grads = [batch(call)[rows].mean(0) for call in range(update * K, (update + 1) * K)]
            w -= LR * np.mean(grads, 0)
    return w, CALLS // K


def run_node(case, address, servers, chief, spec_path, rows):
    """This node's (W, global step) after its calls and the wait for every node's updates (``case["w"]``; at
    the deadline it reads what is there, and the test shows the difference)."""
    import tensorflow as tf
    tf1 = tf.compat.v1
    ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None] + list(SHAPE))
        w = tf1.get_variable("W", initializer=tf.zeros(SHAPE))
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(LR).minimize(tf.reduce_sum(tf.reduce_mean(x, 0) * w),
                                                                global_step=step)
        sess = ad.create_distributed_session()
        try:
            for call in range(CALLS):
                sess.run(train, {x: batch(call)[rows]})
            deadline = time.monotonic() + WAIT_S
            while not np.allclose(sess.run(w), case["w"], rtol=1e-5, atol=1e-6) and time.monotonic() < deadline:
                time.sleep(0.05)
            return sess.run([w, step])
        finally:
            sess.close()
