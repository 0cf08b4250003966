"""One node's part of a mixed-precision ``fit`` case (``keras_half_models``), run by ``eq_harness``'s node processes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

import tensorflow as tf  # noqa: E402

import eq_harness  # noqa: E402
import keras_half_models as half  # noqa: E402


def run_node(case, address, servers, chief, spec_path, rows):
    """``keras_half_models.run`` of this node, with its trainable weights (``fit`` splits the data itself)."""
    with half.mixed_float16():
        ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
        with tf.Graph().as_default(), ad.scope():
            model = half.build(case["optimizer"])
        result = half.run(model)
        result["weights"] = ad.session.run([w.value for w in model.trainable_weights])
        ad.session.close()
    return result
