"""model.fit/evaluate/predict on a multi-node job, checked against single-device Keras on every node.

    python keras_fit_job.py SPEC BUILDER KIND

Every node first trains the reference (plain eager Keras, one device, the same
seed, data and global batch), then the distributed model, and prints
``KERAS_FIT node=<i> history=<max relative difference> evaluate=... predict=...``.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "runtime", "keras"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from autodist import AutoDist, strategies  # noqa: E402
from keras_fit_models import BATCH, build, data  # noqa: E402


def _diff(actual, expected):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(actual - expected) / (np.abs(expected) + 1e-4)))


def main(spec, builder, kind):
    x, y = data(kind)
    fit = dict(batch_size=BATCH, epochs=2, shuffle=False, verbose=0, validation_data=(x[:20], y[:20]))
    reference = build(kind)
    expected = reference.fit(x, y, **fit).history
    expected_eval = reference.evaluate(x, y, verbose=0)
    expected_predict = reference.predict(x[:9], verbose=0)
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, getattr(strategies, builder)())
    with tf.Graph().as_default(), ad.scope():
        model = build(kind)
    history = model.fit(x, y, **fit).history
    history_diff = max(_diff(history[name], expected[name]) for name in expected)
    evaluate_diff = _diff(model.evaluate(x, y, verbose=0), expected_eval)
    predict_diff = _diff(model.predict(x[:9], verbose=0), expected_predict)
    print("KERAS_FIT node={} keys={} history={:.2e} evaluate={:.2e} predict={:.2e}".format(
        ad.worker_index, sorted(history) == sorted(expected), history_diff, evaluate_diff, predict_diff), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
