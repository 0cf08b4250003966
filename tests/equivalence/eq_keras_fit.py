"""One node's part of a Keras ``fit`` equivalence case (run by ``eq_harness``'s node processes).

A case may set a dtype ``policy`` (mixed precision) and Keras' own ``keras_accumulation_steps``.

The node builds ``keras_fit_models``' model of the case's kind in the scope of
an AutoDist attached to the pool's servers, runs ``keras_fit_models.run`` on
it (``fit`` on the whole data, which ``fit`` itself shares out among the nodes;
``evaluate``; ``predict``) and returns the results with its trainable weights.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import eq_harness  # noqa: E402
from keras_fit_models import build, run  # noqa: E402


def run_node(case, address, servers, chief, spec_path, rows):
    """``{history, evaluate, predict, weights}`` of this node (``rows`` is unused: ``fit`` splits the data)."""
    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy(case.get("policy", "float32"))
    try:
        ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
        with tf.Graph().as_default(), ad.scope():
            model = build(case["model"], case.get("keras_accumulation_steps"))
        result = run(model, case["model"])
        result["weights"] = ad.session.run([w.value for w in model.weights if w.trainable])
        ad.session.close()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return result
