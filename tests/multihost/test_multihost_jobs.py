"""Jobs on separate hosts (network namespaces, real SSH, shaped links) train as one device does.

One emulated cluster of three nodes serves the module (specs of its first two
or three nodes); each path is shown once: the demo model (PS) and Keras
``fit`` (AllReduce) on two hosts, the linear job on three (AllReduce),
``autodist run`` of an unmodified script restarted after a host's script was
killed. AutoStrategy on three hosts: ``test_multihost_calibrate.py``.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import demo_check
from jobtools import REPO, SCRIPTS, job_processes, linear_reference, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DEMO = os.path.join(REPO, "examples", "linear_regression.py")
UNMODIFIED = os.path.join(REPO, "examples", "unmodified_train.py")


@pytest.fixture(scope="module")
def cluster(make_cluster):
    return make_cluster(3, "1gbit")


def test_demo_on_two_hosts_equals_one_device(cluster, chiefs, tmp_path):
    log_dir = tmp_path / "demo"
    chief = chiefs(cluster.exec_argv([DEMO, "--spec", cluster.spec_for(2), "--steps", "30", "--strategy", "PS",
                                      "--log-dir", str(log_dir)]))
    assert chief.wait(240) == 0, chief.output()[-4000:]
    learned = demo_check.check(chief.output(), (log_dir / "loss.log").read_text(), steps=30, nodes=2)
    assert any(prefix == "[10.77.0.2] " for prefix, *_ in learned)   # node 1 ran on the other host


def test_linear_job_on_three_hosts_equals_one_device(cluster, chiefs):
    chief = chiefs(cluster.exec_argv([os.path.join(SCRIPTS, "job_linear.py"), cluster.spec_for(3), "--strategy",
                                      "AllReduce", "--steps", "3"]))
    assert chief.wait(240) == 0, chief.output()[-4000:]
    results = chief.results()
    assert set(results) == {None, "10.77.0.2", "10.77.0.3"}, chief.output()[-4000:]
    losses, w = linear_reference(seed=0, steps=3)
    ordered = sorted(results.values(), key=lambda r: r["index"])
    for step in range(3):
        np.testing.assert_allclose([v for r in ordered for v in r["losses"][step]], losses[step], rtol=1e-5, atol=1e-6)
    for r in ordered:
        np.testing.assert_allclose(r["w"], w, rtol=1e-5, atol=1e-6)
    assert job_processes(chief.job_id) == []


def test_keras_fit_on_two_hosts_equals_one_device(cluster):
    done = subprocess.run([sys.executable] + cluster.exec_argv([os.path.join(SCRIPTS, "keras_fit_job.py"),
                                                               cluster.spec_for(2), "AllReduce", "dense"]),
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = re.findall(r"(\[10\.77\.0\.2\] )?KERAS_FIT node=(\d) keys=(\w+) history=(\S+) evaluate=(\S+) "
                       r"predict=(\S+)", output)
    assert sorted(line[1] for line in lines) == ["0", "1"] and lines[0][0] != lines[1][0], output[-4000:]
    for _, _, keys, *diffs in lines:
        assert keys == "True" and max(float(d) for d in diffs) < 1e-4, lines


def _weights(text, node=""):
    found = [line for line in text.splitlines() if line.startswith(node + "weights ")]
    assert found, text[-3000:]
    return json.loads(found[-1][len(node + "weights "):])


def unmodified_reference(steps):
    """The weights of ``examples/unmodified_train.py --session monitored`` trained alone, uninterrupted."""
    done = subprocess.run([sys.executable, UNMODIFIED, "--session", "monitored", "--steps", str(steps)],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return _weights(done.stdout)


def assert_weights(got, expected):
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5)


def script_of(job_id, host):
    """The process group of the training script another host runs for ``job_id`` (its sshd's child)."""
    for pid in job_processes(job_id):
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            command = f.read().replace(b"\0", b" ").decode()
        if "unmodified_train.py" in command and "python" in command.split()[0] and os.getpgid(pid) == pid:
            with open("/proc/{}/environ".format(pid), "rb") as f:
                if host.encode() in f.read():
                    return pid
    raise AssertionError("no script of job {} on {}".format(job_id, host))


def test_autodist_run_of_an_unmodified_script_restarts_after_a_hosts_script_is_killed(cluster, chiefs, tmp_path):
    expected = unmodified_reference(16)
    chief = chiefs(cluster.exec_argv(["-m", "autodist", "run", "-r", cluster.spec_for(2), "-s", "AllReduce",
                                      "--max-restarts", "1", "--restart-backoff", "1", UNMODIFIED, "--session",
                                      "monitored", "--steps", "16", "--save-steps", "4", "--step-sleep", "0.3",
                                      "--checkpoint-dir", str(tmp_path / "ckpt")]))
    chief.wait_for(r"^\[10\.77\.0\.2\] step 9 loss", 240)   # after the checkpoint at global step 8
    first = chief.job_id
    killed_at = time.monotonic()
    os.killpg(script_of(first, "10.77.0.2"), signal.SIGKILL)
    assert chief.wait(300) == 0, chief.output()[-4000:]
    out = chief.output()
    restart = chief.find(r"\[autodist\] restart 1 of 1 in 1 s: attempt 1 .*10\.77\.0\.2 failed: its training script "
                         r"exited with code 137 \(killed by SIGKILL\)")
    resumed = chief.find(r"\[autodist\] attempt 2: resuming from checkpoint .*model\.ckpt-(\d+) \(global step \d+\)")
    assert restart and resumed, out[-4000:]
    assert int(resumed[1].group(1)) >= 8
    print("restart line {:.1f} s after the kill; resumed from step {} {:.1f} s after it".format(
        restart[0] - killed_at, resumed[1].group(1), resumed[0] - killed_at))
    assert len(re.findall(r"\[autodist\] job \S+: 2 nodes", out)) == 2
    for node in ("", "[10.77.0.2] "):
        assert_weights(_weights(out, node), expected)
    for job_id in set(re.findall(r"\[autodist\] job (\S+): ", out)):
        assert wait_until(lambda: job_processes(job_id) == [], 15), job_processes(job_id)
