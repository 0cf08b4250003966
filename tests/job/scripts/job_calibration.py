"""AutoStrategy plans with the chief's calibration on every node (issue 14), whatever a node's own cache holds.

    python job_calibration.py SPEC MEMBER_CALIBRATION_JSON

The chief starts the job with the probe cache it finds. Every other node,
before it joins, overwrites its own cache with ``MEMBER_CALIBRATION_JSON``
(as a node whose probe found something else; loopback nodes share one
cache file). Then every node prints ``RESULT`` with the plan its job's builder
builds (what a session reopened by ``ad.function`` runs) and the plan a fresh
``AutoStrategy()`` builds from the cache as it now is.
"""
import json
import sys

import tensorflow as tf

import autodist
from autodist.strategies import AutoStrategy
from autodist.strategies.cost import Calibration, save_calibration


def main(spec, member_calibration):
    ad = autodist.AutoDist(spec, AutoStrategy())
    if not ad.is_chief:
        save_calibration(ad.resource_spec, Calibration.from_dict(json.loads(member_calibration)))
    tf1 = tf.compat.v1
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 64], name="x")
        w1 = tf1.get_variable("w1", [64, 256])
        w2 = tf1.get_variable("w2", [256, 1])
        loss = tf.reduce_mean(tf.matmul(tf.matmul(x, w1), w2) ** 2)
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        ad.create_distributed_session()
        item, resource_spec = ad.graph_item, ad.resource_spec
        job = ad.strategy_builder.search(item, resource_spec)
        own = AutoStrategy().search(item, resource_spec)
    sys.stdout.write("RESULT {}\n".format(json.dumps({
        "job": [job.chosen, job.strategy.id], "own": [own.chosen, own.strategy.id]})))
    sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:3])
