"""The equivalence tests' node pools: long-lived node processes per topology, shared by the whole session.

``pools(topology)`` (``eq_harness.TOPOLOGIES``) starts that topology's nodes on
first use (starting TensorFlow costs seconds per process), so the graph-mode
matrix and the Keras ``fit`` matrix share the two-node pool; every case is a
job of its own, whose resources are dropped when it ends.
"""
import os

import pytest

import eq_harness as harness

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def pools(tmp_path_factory):
    created = {}

    def get(topology):
        if topology not in created:
            nodes = harness.TOPOLOGIES[topology]
            created[topology] = harness.NodePool(nodes, harness.write_spec(tmp_path_factory.mktemp("spec"), nodes),
                                                 HERE)
        return created[topology]

    yield get
    for pool in created.values():
        pool.close()
