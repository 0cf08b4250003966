"""runtime.autorun.checkpoints: ``autodist run --checkpoint-dir`` resumes any script at its saved step, exactly.

An unmodified script (``tests/job/scripts/plain_steps.py``: every step reads
rows no other step reads, momentum SGD) runs under ``run_script`` on one node
with two CPU replicas, fails after step 7 with a checkpoint every 3 steps, and
runs again from its start: the second run restores step 6, passes over the
first six steps and ends with the weights of an uninterrupted run. Killed jobs
on two processes: ``tests/job/test_autorun_checkpoints.py``.
"""
import os

import keras
import numpy as np
import pytest

from autodist import AutoDist
from autodist.checkpoint.resume import newest_checkpoint, step_of
from autodist.errors import CheckpointError, SessionError
from autodist.runtime.autorun.checkpoints import ScriptCheckpoints
from autodist.runtime.autorun.run import run_script
from autodist.strategies import AllReduce

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "job", "scripts",
                      "plain_steps.py")


def _job(spec, ckpt, args, lines):
    """One run of the script under ``run_script`` with ``--checkpoint-dir ckpt --checkpoint-steps 3``."""
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    checkpoints = ScriptCheckpoints(str(ckpt), 3, None, ad.job, os.environ, lines.append)
    return run_script(ad, SCRIPT, args), checkpoints


def _weights(prefix):
    with np.load(str(prefix) + "-0.npz") as found:
        return [found[key] for key in sorted(found.files)]


@pytest.mark.parametrize("mode", ["feed", "dataset", "fit"])
def test_a_failed_run_started_again_resumes_at_the_saved_step_with_the_uninterrupted_weights(spec, tmp_path,
                                                                                             mode, capsys):
    ckpt, lines, draws = tmp_path / "ckpt", [], ["--draws", "2"]   # the spec's two replicas
    keras.backend.clear_session(free_memory=False)   # the uninterrupted run (fit's shuffles are autodist's, not Keras')
    assert run_script(AutoDist(spec, AllReduce()), SCRIPT, [str(tmp_path / "whole"), "--mode", mode] + draws) == 0
    with pytest.raises(RuntimeError, match="failing after step 7"):
        _job(spec, ckpt, [str(tmp_path / "first"), "--mode", mode, "--fail-at", "7"] + draws, lines)
    assert step_of(newest_checkpoint(str(ckpt))) == 6 and lines == []   # saved at 3 and 6, by training steps
    capsys.readouterr()
    status, checkpoints = _job(spec, ckpt, [str(tmp_path / "again"), "--mode", mode] + draws, lines)
    assert status == 0
    assert lines[:2] == ["resuming from checkpoint {} (global step 6)".format(ckpt / "model.ckpt-6"),
                         "the script is at training step 6 again (the checkpoint's): training goes on from there"]
    printed = capsys.readouterr().out.split()
    assert printed.count("STEP") == (6 if mode == "fit" else 12)   # fit's callbacks do not see the steps passed over
    for got, expected in zip(_weights(tmp_path / "again"), _weights(tmp_path / "whole")):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)   # the same computation: float32 rounding
    assert step_of(newest_checkpoint(str(ckpt))) == 12
    checkpoints.finish()
    assert not ckpt.exists() and lines[-1].startswith("the job succeeded: its checkpoints in")


SCRIPT_FETCHING_AFTER_TRAINING = """
import tensorflow as tf
tf1 = tf.compat.v1
with tf.Graph().as_default():
    w = tf1.get_variable("w", [1], initializer=tf1.ones_initializer())
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(w * w))
    with tf.control_dependencies([train]):
        after = tf.identity(w.read_value(), name="after")
    with tf1.Session() as sess:
        for _ in range(4):
            sess.run([train, after])
"""


def test_a_value_computed_after_training_in_a_step_passed_over_is_refused(spec, tmp_path):
    script = tmp_path / "after.py"
    script.write_text(SCRIPT_FETCHING_AFTER_TRAINING)
    lines = []
    for run in range(2):
        ad = AutoDist(spec, AllReduce())
        ScriptCheckpoints(str(tmp_path / "ckpt"), 2, None, ad.job, os.environ, lines.append)
        if run == 0:
            assert run_script(ad, str(script), []) == 0
            continue
        with pytest.raises(CheckpointError, match="fetches 'after:0' in a training step that the checkpoint "
                                                  "already holds, and it is computed after the training op"):
            run_script(ad, str(script), [])


def test_the_scripts_own_checkpoint_dir_beside_the_option_is_refused(spec, tmp_path):
    script = tmp_path / "monitored.py"
    script.write_text("import tensorflow as tf\ntf1 = tf.compat.v1\nwith tf.Graph().as_default():\n"
                      "    w = tf1.get_variable('w', [1])\n"
                      "    train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(w * w))\n"
                      "    tf1.train.MonitoredTrainingSession(checkpoint_dir={!r})\n".format(str(tmp_path / "own")))
    ad = AutoDist(spec, AllReduce())
    ScriptCheckpoints(str(tmp_path / "ckpt"), 2, None, ad.job, os.environ, print)
    with pytest.raises(SessionError, match="both would save and restore the job; keep one"):
        run_script(ad, str(script), [])
