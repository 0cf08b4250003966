"""Keras ``fit`` on two loopback nodes equals single-device ``fit``, under every synchronous builder.

Every builder (and AutoStrategy) x {dense, CNN, Embedding} (Parallax on the
Embedding model only: on the others its plan is AllReduce's, ``tests/dedupe.py``): the history
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

import numpy as np
import pytest

import eq_harness as harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

from dedupe import builders_for  # noqa: E402
from keras_fit_models import BUILDERS, KINDS, SPARSE_KINDS, check, reference  # noqa: E402

TOPOLOGY = "2nodes-1+1"
pytestmark = pytest.mark.slow


@functools.lru_cache(maxsize=None)
def _reference(kind, accumulation_steps=None, policy="float32"):
    return reference(kind, accumulation_steps, policy)


@pytest.mark.pool(TOPOLOGY)
@pytest.mark.parametrize("builder,kind", [pytest.param(b, k, id="{}-{}".format(b, k)) for b in BUILDERS for k in KINDS
                                          if b in builders_for(BUILDERS, k in SPARSE_KINDS)])
def test_fit_on_two_nodes_equals_single_device(builder, kind, pools, tmp_path):
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    case = harness.new_case(builder, kind, tmp_path, module="eq_keras_fit")
    results = pools(TOPOLOGY).run(case, {address: None for address, _ in nodes})
    assert len(results) == len(nodes)
    for node_result in results:
        check(node_result, _reference(kind))


@pytest.mark.pool(TOPOLOGY)
@pytest.mark.parametrize("how", ["AutoDist", "Keras"])
@pytest.mark.parametrize("builder", builders_for(BUILDERS, sparse=False))   # the dense model
def test_accumulating_fit_on_two_nodes_equals_single_device_keras_accumulation(builder, how, pools, tmp_path):
    """``AutoDist(accumulation_steps=3)``, or Keras' own ``gradient_accumulation_steps=3``: the history, evaluate,
    predict and weights of Keras' own accumulation on one device (the dense model; an epoch of 4 batches ends
    mid-accumulation, and the logs of every batch are the job's)."""
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    extra = {"accumulation_steps": 3} if how == "AutoDist" else {"keras_accumulation_steps": 3}
    case = harness.new_case(builder, "dense", tmp_path, module="eq_keras_fit", **extra)
    for node_result in pools(TOPOLOGY).run(case, {address: None for address, _ in nodes}):
        check(node_result, _reference("dense", 3))


@pytest.mark.pool("2nodes-2+1")
@pytest.mark.parametrize("builder", ["PS", "AllReduce", "PartitionedPS"])   # Parallax plans this Dense as AllReduce
def test_an_inf_gradient_on_one_replica_skips_the_step_on_every_replica(builder, pools, tmp_path):
    """Loss scaling decides once for the job: the last replica of the last node sees an inf gradient, and every
    replica of every node keeps its weights and halves its loss scale (the finite check reads the synchronized
    gradients, which the inf reaches on every replica)."""
    import eq_loss_scale
    topology = "2nodes-2+1"
    nodes = harness.TOPOLOGIES[topology]
    rows, start = {}, 0
    for address, count in nodes:
        rows[address] = slice(start, start + 4 * count)
        start += 4 * count
    case = harness.new_case(builder, "scaled", tmp_path, module="eq_loss_scale")
    results = pools(topology).run(case, rows)
    assert sum(len(r["after"]) for r in results) == 3 * 4   # 3 replicas, 2 weights and 2 state variables each
    for result in results:
        for (replica, var_op), value in result["after"].items():
            if var_op in result["weights"]:
                np.testing.assert_array_equal(value, result["before"][(replica, var_op)])
        scale, counter = result["state"]
        for (replica, var_op), value in result["after"].items():
            if var_op == scale:
                assert value == result["before"][(replica, var_op)] / 2 == eq_loss_scale.INITIAL_SCALE / 2
            if var_op == counter:   # the first step was finite and counted; the second reset it
                assert result["before"][(replica, var_op)] == 1 and value == 0
