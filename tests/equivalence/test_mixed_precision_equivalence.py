"""Mixed precision on two loopback nodes of two replicas each: the steps and numbers of one device.

The ``keras_half_models`` regression (``mixed_float16``, Keras' default dynamic loss scale, SGD or
momentum) through ``fit`` on four replicas: the per-batch losses, ``evaluate``, ``predict`` and every
node's weights equal single-device Keras within float16 tolerance under every synchronous builder and
AutoStrategy. Before each replica computed its share of the gradient (``autodist/kernel/loss_shares.py``)
the replicas holding the batches' first halves overflowed at scales one device keeps, and the job
skipped steps. ``tests/runtime/keras/test_keras_mixed_precision.py`` runs one node of two replicas.
"""
import functools
import os
import sys

import pytest

import eq_harness as harness

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

import keras_half_models as half  # noqa: E402
from keras_fit_models import BUILDERS  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.pool("2nodes-2+2")]   # the pool: tests/sharding.py

TOPOLOGY = "2nodes-2+2"
CELLS = [("sgd", builder) for builder in BUILDERS] + [("momentum", "PS"), ("momentum", "AllReduce")]
_reference = functools.lru_cache(maxsize=None)(half.reference)


@pytest.mark.parametrize("optimizer,builder", [pytest.param(o, b, id="{}-{}".format(o, b)) for o, b in CELLS])
def test_mixed_float16_fit_on_four_replicas_takes_the_steps_one_device_takes(optimizer, builder, pools, tmp_path):
    nodes = harness.TOPOLOGIES[TOPOLOGY]
    case = harness.new_case(builder, "half", tmp_path, module="eq_mixed_precision", optimizer=optimizer)
    results = pools(TOPOLOGY).run(case, {address: None for address, _ in nodes})
    assert len(results) == len(nodes)
    for node_result in results:
        half.check(node_result, _reference(optimizer))
