"""Saver.save on every node, as in AutoDist 0.7 (its integration case c0): two loopback nodes, real processes.

Each node writes the checkpoint to its own directory (a node without a shared
filesystem finds it on its own disk), and a plain ``tf.compat.v1.train.Saver``
restores it there; both nodes writing one shared path leave a whole checkpoint.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from jobtools import REPO, SCRIPTS

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")


def _plain_restore(path):
    """The weights a plain tf1 Saver restores from ``path`` into the single-device graph."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        w = tf.compat.v1.get_variable("w", shape=[3, 1])
        tf.compat.v1.train.Saver().restore(session, path)
        return session.run(w).ravel().tolist()


@pytest.mark.parametrize("builder", ["PS", "AllReduce"])
def test_saver_save_on_every_node(chiefs, tmp_path, builder):
    chief = chiefs([os.path.join(SCRIPTS, "job_save.py"), LOOPBACK, str(tmp_path), "--strategy", builder])
    assert chief.wait(120) == 0, chief.output()[-4000:]
    results = sorted(chief.results().values(), key=lambda r: r["index"])
    assert [r["index"] for r in results] == [0, 1], chief.output()[-4000:]
    for result in results:
        own = str(tmp_path / "node{}".format(result["index"]) / "model-2")
        assert result["own"] == own and result["shared"] == str(tmp_path / "shared" / "model")
        assert os.path.exists(own + ".index") and os.path.exists(own + ".meta")
        assert tf.train.get_checkpoint_state(os.path.dirname(own)).model_checkpoint_path == own
        np.testing.assert_allclose(_plain_restore(own), result["w"], rtol=1e-6)
    np.testing.assert_allclose(results[0]["w"], results[1]["w"], rtol=1e-6)
    np.testing.assert_allclose(_plain_restore(str(tmp_path / "shared" / "model")), results[0]["w"], rtol=1e-6)
    assert not [name for name in os.listdir(tmp_path / "shared") if "tmp" in name or "temp" in name]
