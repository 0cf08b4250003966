"""``autodist run``: unmodified tf.compat.v1 scripts, in process on one node and as a two-node job."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from autodist.api import AutoDist
from autodist.runtime.autorun.run import NUM_WORKERS_ENV, WORKER_INDEX_ENV, run_script
from autodist.errors import CaptureError, SessionError
from autodist.runner.console import is_chatter
from autodist.runtime.launch.server import READY
from jobtools import REPO, job_processes

SINGLE = os.path.join(REPO, "resource_specs", "single_node_cpu.yml")
LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
EXAMPLE = os.path.join(REPO, "examples", "unmodified_train.py")

PRELUDE = """
import os, sys
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
graph = tf.Graph()
with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 1], name="x")
    w = tf1.get_variable("w", initializer=tf.constant([[2.0]]))
    count = tf1.get_variable("count", initializer=0.0, trainable=False,
                             collections=[tf1.GraphKeys.LOCAL_VARIABLES])
    bump = count.assign_add(1.0)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf1.global_variables_initializer()
    local_init = tf1.local_variables_initializer()
"""


def _run(tmp_path, body, args=()):
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return run_script(AutoDist(SINGLE), str(script), list(args))


def _originals():
    v1, train = tf.compat.v1, tf.compat.v1.train
    return (v1.Session, v1.InteractiveSession, train.MonitoredTrainingSession, train.MonitoredSession,
            train.SingularMonitoredSession, train.Saver.__dict__["save"], train.Saver.__dict__["restore"])


def test_session_of_an_unmodified_script_trains_and_everything_is_restored(tmp_path):
    before, argv, path0 = _originals(), list(sys.argv), list(sys.path)
    status = _run(tmp_path, """
        assert sys.argv[1:] == ["--flag", "a b"], sys.argv
        assert os.environ["AUTODIST_WORKER_INDEX"] == "0" and os.environ["AUTODIST_NUM_WORKERS"] == "1"
        with graph.as_default(), tf1.Session() as sess:
            assert tf1.get_default_session() is sess
            sess.run(init)
            for _ in range(2):
                sess.run(train, {x: [[1.0], [2.0]]})
            sess.run(init)                     # a global initializer: must not reset w
            trained = sess.run(w)[0, 0]
            assert abs(trained - 2.0) > 0.1, trained
            sess.run(bump); sess.run(local_init)   # a local one (metrics) does run
            assert sess.run(count) == 0.0
            assert loss.eval(feed_dict={x: [[1.0]]}) > 0   # Tensor.eval through the default session
            late = tf1.global_variables_initializer()      # ops made after the session are fine...
            sess.run(late)                                  # ...and an initializer among them is skipped
        print("trained", trained)
    """, args=["--flag", "a b"])
    assert status == 0
    assert _originals() == before and sys.argv == argv and sys.path == path0
    assert WORKER_INDEX_ENV not in os.environ and NUM_WORKERS_ENV not in os.environ


def test_everything_is_restored_after_the_script_raises(tmp_path):
    before = _originals()
    with pytest.raises(ZeroDivisionError):
        _run(tmp_path, "1 / 0\n")
    assert _originals() == before
    assert WORKER_INDEX_ENV not in os.environ


def test_exit_status_of_the_script_is_returned(tmp_path):
    assert _run(tmp_path, """
        with graph.as_default(), tf1.Session() as sess:
            sess.run(train, {x: [[1.0]]})
        sys.exit(3)
    """) == 3


def test_a_script_that_never_trains_through_a_session_is_an_error(tmp_path):
    with pytest.raises(CaptureError, match="nothing was distributed"):
        _run(tmp_path, "print('no session')\n")


def test_a_session_on_a_graph_without_training_is_a_plain_session(tmp_path):
    assert _run(tmp_path, """
        other = tf.Graph()
        with other.as_default():
            c = tf.constant(4.0)
            with tf1.Session() as plain:
                assert type(plain).__module__ + "." + type(plain).__name__ == \
                    "tensorflow.python.client.session.Session"
                assert plain.run(c) == 4.0
        with graph.as_default(), tf1.Session() as sess:
            sess.run(train, {x: [[1.0]]})
    """) == 0


@pytest.mark.parametrize("body, message", [
    ("""
        with graph.as_default():
            tf1.Session(); tf1.Session()
     """, "second session"),
    ("""
        with graph.as_default():
            tf1.train.MonitoredTrainingSession(summary_dir="/tmp/summaries")
     """, "summary_dir"),
    ("""
        with graph.as_default():
            hook = tf1.train.CheckpointSaverHook("/tmp/ckpt", save_steps=1)
            tf1.train.MonitoredTrainingSession(hooks=[hook])
     """, "CheckpointSaverHook"),
    ("""
        with graph.as_default():
            tf1.InteractiveSession()
     """, "InteractiveSession"),
    ("""
        with graph.as_default():
            saver = tf1.train.Saver()
            sess = tf1.Session()
            saver.save(sess, "/tmp/never")
     """, "autodist.checkpoint.Saver"),
], ids=["second-session", "checkpoint-dir", "checkpoint-hook", "interactive", "saver"])
def test_unsupported_use_is_a_clear_error(tmp_path, body, message):
    before = _originals()
    with pytest.raises(SessionError, match=message):
        _run(tmp_path, body)
    assert _originals() == before


def test_monitored_training_session_with_hooks(tmp_path):
    assert _run(tmp_path, """
        with graph.as_default():
            step = tf1.train.get_or_create_global_step()
            train_step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
            final = tf1.train.FinalOpsHook([w])
            runs = 0
            with tf1.train.MonitoredTrainingSession(hooks=[tf1.train.StopAtStepHook(last_step=3), final]) as sess:
                while not sess.should_stop():
                    sess.run(train_step, {x: [[1.0]]})
                    runs += 1
            assert runs == 3, runs
            assert final.final_ops_values[0][0, 0] != 2.0
    """) == 0


# -- the shipped example as a two-node job ----------------------------------------------------------

def _lines(text, prefix):
    """Step losses and the weights line of one node. The chief's own prints may be cut by the other
    nodes' lines (print writes text and newline separately), which are written whole."""
    start = r"(?:^|\n)" if not prefix else re.escape(prefix)
    steps = {int(m.group(1)): float(m.group(2))
             for m in re.finditer(start + r"step (\d+) loss ([0-9]+\.[0-9]{6})", text)}
    weights = re.search(start + r"weights (\{.*?\]\})", text)
    return steps, weights.group(1) if weights else None


def _python(argv, timeout):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    for key in (WORKER_INDEX_ENV, NUM_WORKERS_ENV):
        env.pop(key, None)
    done = subprocess.run([sys.executable] + argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def reference():
    code, out = _python([EXAMPLE, "--steps", "3"], 120)
    assert code == 0, out
    return _lines(out, "")


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    [],
    ["-s", "AllReduce", EXAMPLE, "--session", "monitored", "--input", "dataset"],
], ids=["session-feed-default-builder", "monitored-dataset-allreduce"])
def test_autodist_run_example_on_two_nodes_matches_one_device(reference, options):
    argv = ["-m", "autodist", "run", "-r", LOOPBACK] + (options or [EXAMPLE]) + ["--steps", "3"]
    code, out = _python(argv, 200)
    assert code == 0, out[-4000:]
    job_id = re.search(r"\[autodist\] job (\S+):", out).group(1)
    # a clean console: no TensorFlow start-up lines and no handshake from any process; it names the logs
    noise = [line for line in out.splitlines() if is_chatter(re.sub(r"^\[[^\]]+\] ", "", line)) or READY in line]
    assert noise == [], out[-4000:]
    assert "node logs in ~/.autodist/logs/job-" + job_id in out
    ref_steps, ref_weights = reference
    chief_steps, chief_weights = _lines(out, "")
    worker_steps, worker_weights = _lines(out, "[127.0.0.2] ")
    assert sorted(chief_steps) == sorted(worker_steps) == [0, 1, 2], out[-4000:]
    for step, loss in ref_steps.items():   # equal halves: the mean of the halves is the whole
        assert abs((chief_steps[step] + worker_steps[step]) / 2 - loss) < 2e-6
    for got in (chief_weights, worker_weights):
        np.testing.assert_allclose(np.array(eval_weights(got)), np.array(eval_weights(ref_weights)), rtol=1e-5)
    assert job_processes(job_id) == []


def eval_weights(text):
    import json
    data = json.loads(text)
    return [v for key in sorted(data) for v in data[key]]


class _Recorder:
    """Stands in for the distributed session: records what the autorun session asks it to run."""

    def __init__(self):
        self.asked = []

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        self.asked.append([getattr(f, "name", f) for f in fetches])
        return [None] * len(fetches)


def test_only_groups_of_initializers_are_taken_apart():
    from autodist.runtime.autorun.script_session import AutorunSession
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([[2.0]]))
        count = tf.compat.v1.get_variable("count", initializer=0.0, trainable=False,
                                          collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        loss = tf.reduce_sum(w * w)
        bare = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)   # a NoOp grouping updates
        both = tf.group(tf.compat.v1.global_variables_initializer(), tf.compat.v1.local_variables_initializer())
        mixed = tf.group(w.initializer, bare)
    recorder = _Recorder()
    session = AutorunSession(recorder, graph)
    assert bare.type == "NoOp" and bare.control_inputs
    session.run(bare)
    assert recorder.asked[-1] == [bare.name]          # the train op itself: it carries the job's synchronization
    session.run(both)
    assert recorder.asked[-1] == [count.initializer.name]   # global initializers drop out, local ones run
    session.run(mixed)
    assert recorder.asked[-1] == [mixed.name]          # not only initializers: run as it is


def test_run_options_for_the_console_are_the_chiefs_and_verbose_reaches_every_node():
    from autodist.cli import build_parser
    from autodist.cli.run import worker_argv
    args = build_parser().parse_args(["run", "-r", "spec.yml", "--verbose", "--steps", "5", "train.py", "--steps", "3"])
    assert (args.verbose, args.steps, args.progress, args.script_args) == (True, 5, True, ["--steps", "3"])
    assert build_parser().parse_args(["run", "-r", "spec.yml", "--no-progress", "train.py"]).progress is False
    assert worker_argv("/s.yml", None, [], "/t.py", ["--steps", "3"], verbose=True) == [
        "-m", "autodist", "run", "-r", "/s.yml", "--verbose", "/t.py", "--steps", "3"]
    assert "--verbose" not in worker_argv("/s.yml", None, [], "/t.py", [])
