"""The examples run on the two-node loopback spec and reach their stated results (short runs).

Each test starts one example as the user would (the chief launches the second
node as a local process), with few steps, and checks the numbers it prints.
"""
import os
import re
import subprocess
import sys

import pytest

from autodist.runner.console import is_chatter
from autodist.runtime.launch.server import READY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow


def _run(script, *args, timeout=300):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script)] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output


def _values(pattern, output):
    return [float(v) for v in re.findall(pattern, output)]


def test_linear_regression_learns_the_weights_and_writes_its_loss_curve(tmp_path):
    output = _run("linear_regression.py", "--steps", "60", "--log-dir", str(tmp_path))
    # the console: no TensorFlow start-up lines, no handshake; a progress summary (plain: not a terminal)
    noise = [line for line in output.splitlines() if is_chatter(re.sub(r"^\[[^\]]+\] ", "", line)) or READY in line]
    assert noise == [], output[-4000:]
    assert re.search(r"^\[autodist\] progress: step 60/60, [\d.]+ steps/s, \d+ examples/s$", output, re.M), output
    assert len(_values(r"\[node 0\] max weight error ([\d.]+)", output)) == 1
    assert _values(r"\[node 1\] max weight error ([\d.]+)", output) == _values(r"\[node 0\] max weight error ([\d.]+)",
                                                                           output)
    assert _values(r"\[node 0\] max weight error ([\d.]+)", output)[0] < 0.05
    lines = (tmp_path / "loss.log").read_text().split()
    assert len(lines) == 2 * 60 and float(lines[-1]) < 0.1 < float(lines[1])
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_linear_regression_traces_both_nodes_and_writes_tensorboard_scalars(tmp_path):
    import json
    output = _run("linear_regression.py", "--steps", "40", "--trace-dir", str(tmp_path / "trace"),
                  "--logdir", str(tmp_path / "tb"))
    trace = json.loads((tmp_path / "trace" / "timeline.json").read_text())
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "step"]
    assert {e["pid"] for e in ops} == {0, 1}
    assert {e["pid"] for e in ops if e["cat"].startswith("communication,")} == {0, 1}
    summary = json.loads((tmp_path / "trace" / "timeline_summary.json").read_text())
    assert sorted((r["node"], r["step"]) for r in summary) == [(n, s) for n in (0, 1) for s in (5, 10, 15)]
    assert "compute ms" in output and str(tmp_path / "trace" / "timeline.json") in output
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == ["node-0", "node-1"]


def test_digits_cnn_learns_on_two_nodes():
    output = _run("digits_cnn.py", "--steps", "60")
    accuracies = _values(r"test accuracy ([\d.]+)", output)
    assert len(accuracies) == 2 and accuracies[0] == accuracies[1] and accuracies[0] >= 0.85


def test_sparse_recommender_improves_held_out_rmse():
    output = _run("sparse_recommender.py", "--steps", "300", "--log-every", "300")
    start = _values(r"\[node 0\] step    0  held-out RMSE ([\d.]+)", output)
    final = _values(r"\[node 0\] final held-out RMSE ([\d.]+)", output)
    assert "1 partitioned" in output and final[0] < start[0] - 0.1


def test_lstm_language_model_loss_falls():
    output = _run("lstm_lm.py", "--steps", "60", "--log-every", "30")
    losses = _values(r"\[node 0\] step +\d+  loss ([\d.]+)", output)
    assert losses[0] > 3.5 and losses[-1] < 2.8
    assert "completion: 'Beautiful is" in output


def test_checkpoint_saved_under_ps_resumes_under_all_reduce_like_uninterrupted_training(tmp_path):
    output = _run("checkpoint_resume.py", "--steps", "10", "--checkpoint-dir", str(tmp_path), timeout=400)
    assert "[127.0.0.2] [node 1] restored model-10 at step 10" in output
    assert re.search(r"resumed == uninterrupted: max difference \S+ over 9 variables: OK", output)


def test_digits_fit_prints_keras_progress_and_learns_on_two_nodes():
    output = _run("digits_fit.py", "--steps", "3")
    assert len(re.findall(r"Epoch \d+/3", output)) == 3
    accuracies = _values(r"test accuracy ([\d.]+)", output)
    assert len(accuracies) == 1 and accuracies[0] >= 0.8
