"""``AutoDist(checkpoint_dir=, save_every=)``: restore-or-initialize at session creation, periodic atomic saves.

One-node jobs in this process; the kill tests run a saving script in a child process and SIGKILL it while it
writes a checkpoint, then check that the newest checkpoint the state file names is complete and consistent.
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.checkpoint.resume import newest_checkpoint, step_of
from autodist.errors import CheckpointError
from ckpt_models import write_spec

tf1 = tf.compat.v1


def _train(spec, ckpt, calls, save_every=3):
    """``calls`` training calls of a small model under checkpointing, then one call reading
    (global step, weights)."""
    ad = AutoDist(spec, checkpoint_dir=str(ckpt), save_every=save_every)
    with tf.Graph().as_default(), ad.scope():
        w = tf1.get_variable("w", [3, 1], initializer=tf1.ones_initializer())
        x = tf.constant([[1.0, 2.0, 3.0]])
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(tf.reduce_sum(tf.square(x @ w)), global_step=step)
        sess = ad.create_distributed_session()
        for _ in range(calls):
            sess.run(train)
        now, weights = sess.run([step, w])
        return int(now), weights


def test_the_chief_saves_every_k_calls_and_a_new_session_resumes_from_the_newest(tmp_path, capsys):
    spec = write_spec(tmp_path, cpus=1)
    step, trained = _train(spec, tmp_path / "ckpt", calls=4)
    assert step == 4
    assert step_of(newest_checkpoint(str(tmp_path / "ckpt"))) == 3   # after the third call
    step, _ = _train(spec, tmp_path / "ckpt", calls=0)
    assert step == 3
    assert "[autodist] resuming from checkpoint {} (global step 3)".format(tmp_path / "ckpt" / "model.ckpt-3") \
        in capsys.readouterr().out
    step, resumed = _train(spec, tmp_path / "ckpt", calls=1)   # restores 3, takes step 4 again
    assert step == 4
    np.testing.assert_allclose(resumed, trained, rtol=1e-6)


def test_without_a_checkpoint_the_variables_keep_their_initial_values(tmp_path):
    step, weights = _train(write_spec(tmp_path, cpus=1), tmp_path / "empty", calls=0)
    assert step == 0 and np.all(weights == 1.0)
    assert newest_checkpoint(str(tmp_path / "empty")) is None


def test_a_graph_without_a_global_step_is_refused_naming_the_fix(tmp_path):
    ad = AutoDist(write_spec(tmp_path, cpus=1), checkpoint_dir=str(tmp_path / "ckpt"), save_every=1)
    with tf.Graph().as_default(), ad.scope():
        w = tf.Variable(1.0)
        tf1.train.GradientDescentOptimizer(0.1).minimize(tf.square(w))
        with pytest.raises(CheckpointError, match="get_or_create_global_step"):
            ad.create_distributed_session()


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4"])
def test_save_every_must_be_a_positive_count(tmp_path, bad):
    with pytest.raises(CheckpointError, match="save_every"):
        AutoDist(write_spec(tmp_path, cpus=1), checkpoint_dir=str(tmp_path), save_every=bad)


# Saves a checkpoint after every call; ``big`` holds the global step in each of its 4M elements, so a torn
# checkpoint would show as values that disagree with the step in its name.
SAVER = """
import sys, tensorflow as tf
from autodist import AutoDist
tf1 = tf.compat.v1
ad = AutoDist(sys.argv[1], checkpoint_dir=sys.argv[2], save_every=1)
with tf.Graph().as_default(), ad.scope():
    w = tf.Variable(1.0, name="w")
    big = tf.Variable(tf.zeros([4000000]), trainable=False, name="big")
    step = tf1.train.get_or_create_global_step()
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.square(w), global_step=step)
    with tf.control_dependencies([train]):
        mark = big.assign(tf.fill([4000000], tf.cast(step.read_value(), tf.float32))).op
    sess = ad.create_distributed_session()
    while True:
        sess.run(mark)
        print("saved", flush=True)
"""


def _partial(name):
    """A file TensorFlow is writing: named so until it is complete and renamed into place."""
    return "tempstate" in name or name.endswith("_temp")


def _kill_while_saving(tmp_path, ckpt):
    """Start SAVER; once a checkpoint exists, SIGKILL it while TensorFlow writes the next one's files."""
    child = subprocess.Popen([sys.executable, "-c", SAVER, write_spec(tmp_path, cpus=1), str(ckpt)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            first = newest_checkpoint(str(ckpt)) is not None
            if first and any(_partial(name) for name in os.listdir(ckpt)):
                child.kill()   # its files for the next step are being written now
                break
            time.sleep(0.001)
        assert child.wait(30) == -signal.SIGKILL, "the saving script ended before it could be killed mid-save"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    return sorted(os.listdir(ckpt))


@pytest.mark.slow
def test_a_kill_mid_save_leaves_the_previous_checkpoint_complete_and_restorable(tmp_path):
    ckpt = tmp_path / "ckpt"
    files = _kill_while_saving(tmp_path, ckpt)
    assert any(_partial(name) for name in files), files   # killed with a save half done
    newest = newest_checkpoint(str(ckpt))
    reader = tf.train.load_checkpoint(newest)
    step = step_of(newest)
    assert reader.get_tensor("global_step") == step
    assert np.all(reader.get_tensor("big") == float(step))
    assert reader.get_tensor("w") == pytest.approx(0.8 ** step)   # w <- w - 0.1 * 2w at every step


def test_a_periodic_save_waits_for_the_end_of_an_accumulation():
    """save_every=1 with k = 3: saves happen only after the calls that applied an update."""
    from autodist.checkpoint.resume import SessionCheckpoints

    class Session:
        after_run, graph = [], None
        at_update_boundary = True

    saves = []
    checkpoints = SessionCheckpoints("/nonexistent-dir", 1, True, {}, lambda text: None)
    checkpoints._resumer.save = lambda step=None: saves.append(step)
    session = Session()
    checkpoints._resumer.session = session
    for call in range(6):
        session.at_update_boundary = call % 3 == 2
        checkpoints._after_run(session)
    assert len(saves) == 2


def test_a_save_asked_before_the_session_exists_saves_nothing_and_says_so_by_its_result(tmp_path):
    # SIGTERM while the chief launches its job: before the fix, AttributeError ('Resumer' has no 'session')
    from autodist.checkpoint.resume import SessionCheckpoints
    checkpoints = SessionCheckpoints(str(tmp_path / "ckpt"), 2, True, {}, say=print)
    assert checkpoints.save_now(timeout=1.0) is False
    assert newest_checkpoint(str(tmp_path / "ckpt")) is None
