"""The model zoo (``zoo_models``) through Keras ``fit``: equal to single-device Keras, one node and two nodes.

Each cell is a job on the equivalence harness's long-lived nodes (``conftest.py`` one level up): one node of
two replicas, or two loopback nodes of one replica each. Every synchronous builder and AutoStrategy trains
some architecture on each topology and each architecture runs on both (``CELLS``); a CNN with
``BatchNormalization(synchronized=True)`` runs under AllReduce, PSLoadBalancing and PartitionedPS
(collectives; parameter servers, whose statistics are relayed through the chief across nodes), MobileNetV2
with ``AutoDist(sync_batch_norm=True)`` under AllReduce on two nodes, and ResNet50 and MobileNetV2 with the
switch under all three on request (``HEAVY``). Per cell: the
epoch losses and every weight equal one device's within ``zoo_models``' stated tolerances, and every
replica's batch-norm statistics are equal.

``python benchmarks/zoo_table.py`` runs this tier and prints the table of the largest weight differences.
"""
import functools
import json
import os

import numpy as np
import pytest

import eq_harness as harness
import zoo_models as zoo

pytestmark = pytest.mark.slow

SYNC_BN = ("AllReduce", "PSLoadBalancing", "PartitionedPS")
#: topology -> [(model, builder)]: every builder (and AutoStrategy) once on each topology, every model on both;
#: the CNN with synchronized batch norm under the three builders of the batch-norm paths (collectives, servers
#: on one node, servers across nodes whose statistics are relayed through the chief).
CELLS = {
    "1node-2replicas": [("transformer", "PS"), ("lstm", "UnevenPartitionedPS"), ("bigru", "PartitionedAR"),
                        ("ncf", "RandomAxisPartitionAR"), ("regularized", "Parallax"), ("transformer", "AutoStrategy")],
    "2nodes-1+1": [("lstm", "PS"), ("bigru", "UnevenPartitionedPS"), ("ncf", "PartitionedAR"),
                   ("regularized", "RandomAxisPartitionAR"), ("transformer", "Parallax"), ("ncf", "AutoStrategy"),
                   ("mobilenetv2", "AllReduce")],
}
#: ResNet50 and MobileNetV2 cost a minute or two a cell (graphs of tens of thousands of ops, traced three times
#: by fit, rewritten and started; on the shared machine MobileNetV2 took 58 s, ResNet50 112 s, the rest of the
#: tier 93 s in all): the suite runs one, MobileNetV2 under AllReduce on two nodes (the switch, job-wide across
#: nodes, on a keras.applications model); ``AUTODIST_ZOO_FULL=1`` (``benchmarks/zoo_table.py --full``) runs both
#: under the three batch-norm builders on both topologies. The CNN cells run the other synchronized paths.
HEAVY = [(model, builder) for model in ("resnet50", "mobilenetv2") for builder in SYNC_BN]
HEAVY_TIMEOUT_S = 1200.0   # a node's answer to a heavy cell: its graph's trace, rewrite, start and steps
for _topology, _cells in CELLS.items():
    _cells += [("cnn_syncbn", builder) for builder in SYNC_BN]
    if os.environ.get("AUTODIST_ZOO_FULL"):
        _cells += [cell for cell in HEAVY if cell not in _cells]

_reference = functools.lru_cache(maxsize=None)(zoo.reference)


def _record(model, builder, topology, result, expected):
    """With ``AUTODIST_ZOO_TABLE`` set (benchmarks/zoo_table.py), append the cell's differences to that file."""
    path = os.environ.get("AUTODIST_ZOO_TABLE")
    if path:
        weights, loss = zoo.differences(result, expected)
        with open(path, "a") as f:
            f.write(json.dumps({"model": model, "builder": builder, "topology": topology,
                                "max_weight_difference": weights, "max_loss_difference": loss}) + "\n")


@pytest.mark.parametrize("topology,model,builder", [
    pytest.param(topology, model, builder, id="{}-{}-{}".format(topology, model, builder))
    for topology, cells in CELLS.items() for model, builder in cells])
def test_zoo_fit_equals_single_device(topology, model, builder, pools, tmp_path):
    nodes = harness.TOPOLOGIES[topology]
    case = harness.new_case(builder, model, tmp_path, module="zoo.eq_zoo",
                            timeout=HEAVY_TIMEOUT_S if (model, builder) in HEAVY else None)
    results = pools(topology).run(case, {address: None for address, _ in nodes})
    expected = _reference(model)
    for result in results:
        zoo.check(result, expected, model)
    for var_op in results[0]["replica_statistics"]:   # every replica of every node holds the same statistics
        copies = [copy for result in results for copy in result["replica_statistics"][var_op]]
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0], err_msg=var_op)
    _record(model, builder, topology, results[0], expected)
