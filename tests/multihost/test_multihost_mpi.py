"""Real Open MPI on separate hosts (``autodist cluster up --mpi``): the example's mpirun trains like one device.

One cluster of two hosts serves the module; ``examples/mpi/train.sh`` runs in
node 0 with the cluster's hostfile, and mpirun starts the rank of host 1
through that host's sshd. No rank is told its address: each finds the one of
its interface that routes to the chief (host 1's rank says ``this is
10.77.0.2``). The job (an unmodified tf.compat.v1 loop, every step on other
rows) ends with the weights of the script run alone on the global batch.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import tiers

from clustertools import mpi_missing_reason
from jobtools import REPO, SCRIPTS, npz_weights

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.mpi]

EXAMPLE = os.path.join(REPO, "examples", "mpi", "train.sh")
SCRIPT = os.path.join(SCRIPTS, "plain_steps.py")


@pytest.fixture(scope="module")
def cluster(make_cluster):
    reason = mpi_missing_reason()
    if reason:
        tiers.unavailable("mpi", reason)
    return make_cluster(2, "1gbit", "--mpi")


def test_the_mpirun_example_across_two_hosts_finds_every_address_and_trains_like_one_device(cluster, tmp_path):
    alone = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "alone"), "--mode", "feed", "--steps", "6"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert alone.returncode == 0, alone.stderr[-3000:]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AUTODIST_")}   # no address given by hand
    environ.update(TF_CPP_MIN_LOG_LEVEL="2", MPIRUN_OPTIONS="--allow-run-as-root",
                   CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    done = cluster.run([EXAMPLE, cluster.names.mpi_hostfile, SCRIPT, str(tmp_path / "mpi"), "--mode", "feed",
                        "--steps", "6"], timeout=300, cwd=REPO, env=environ)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    expected = npz_weights(tmp_path / "alone-0.npz")
    for node in (0, 1):
        address = cluster.address(node)
        assert "this is {} ({}:{})".format(address, address, 29400 + node) in output, output[-4000:]
        for got, want in zip(npz_weights(tmp_path / "mpi-{}.npz".format(node)), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)   # two nodes' mean vs one batch: float32
