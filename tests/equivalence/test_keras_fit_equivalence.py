"""Keras ``fit`` on two loopback nodes equals single-device ``fit``, under every synchronous builder.

Every builder (and AutoStrategy) x {dense, CNN, Embedding}: the history
(losses, metrics, validation), ``evaluate``, ``predict`` and the final weights
on every node equal plain eager Keras on one device with the same seed, data
and global batch (``tests/runtime/keras/keras_fit_models.py``). The nodes are the
equivalence harness's long-lived processes (one TensorFlow server each,
shared with ``test_equivalence.py``: ``conftest.py``); each case is a job of
its own. The one-node matrix is
``tests/runtime/keras/test_keras_fit.py``; ``tests/job/test_keras_fit_job.py``
launches real jobs.
"""
import functools
import os
import sys

import pytest

import eq_harness as harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

from keras_fit_models import BUILDERS, KINDS, check, reference  # noqa: E402

pytestmark = pytest.mark.slow

TOPOLOGY = "2nodes-1+1"


@functools.lru_cache(maxsize=None)
def _reference(kind):
    return reference(kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_fit_on_two_nodes_equals_single_device(builder, kind, pools, tmp_path):
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    case = harness.new_case(builder, kind, tmp_path, module="eq_keras_fit")
    results = pools(TOPOLOGY).run(case, {address: None for address, _ in nodes})
    assert len(results) == len(nodes)
    for node_result in results:
        check(node_result, _reference(kind))
