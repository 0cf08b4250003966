"""Keras ``fit`` on two loopback nodes equals single-device ``fit``, under every synchronous builder.

Every builder (and AutoStrategy) x {dense, CNN, Embedding}: the history
(losses, metrics, validation), ``evaluate``, ``predict`` and the final weights
on every node equal plain eager Keras on one device with the same seed, data
and global batch (``tests/runtime/keras_fit_models.py``). The nodes are the
equivalence harness's long-lived processes (one TensorFlow server each,
shared with ``test_equivalence.py``: ``conftest.py``); each case is a job of
its own. The one-node matrix is
``tests/runtime/test_keras_fit.py``; ``tests/job/test_keras_fit_job.py``
launches real jobs.
"""
import functools
import os
import sys

import pytest

import eq_harness as harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime"))

from keras_fit_models import BUILDERS, KINDS, check, reference  # noqa: E402

pytestmark = pytest.mark.slow

TOPOLOGY = "2nodes-1+1"


@functools.lru_cache(maxsize=None)
def _reference(kind, accumulation_steps=None):
    return reference(kind, accumulation_steps)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_fit_on_two_nodes_equals_single_device(builder, kind, pools, tmp_path):
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    case = harness.new_case(builder, kind, tmp_path, module="eq_keras_fit")
    results = pools(TOPOLOGY).run(case, {address: None for address, _ in nodes})
    assert len(results) == len(nodes)
    for node_result in results:
        check(node_result, _reference(kind))


@pytest.mark.parametrize("how", ["AutoDist", "Keras"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_accumulating_fit_on_two_nodes_equals_single_device_keras_accumulation(builder, how, pools, tmp_path):
    """``AutoDist(accumulation_steps=3)``, or Keras' own ``gradient_accumulation_steps=3``: the history, evaluate,
    predict and weights of Keras' own accumulation on one device (the dense model; an epoch of 4 batches ends
    mid-accumulation, and the logs of every batch are the job's)."""
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    extra = {"accumulation_steps": 3} if how == "AutoDist" else {"keras_accumulation_steps": 3}
    case = harness.new_case(builder, "dense", tmp_path, module="eq_keras_fit", **extra)
    for node_result in pools(TOPOLOGY).run(case, {address: None for address, _ in nodes}):
        check(node_result, _reference("dense", 3))
