"""Bounded staleness across two loopback nodes, with a deliberately slow worker.

``staleness_script.py`` runs a two-node job (the chief launches the second
node as a local process) in which the non-chief sleeps between its steps;
each node records ``(step, start, end)`` of every step. With ``staleness=k``
no node may finish step i before the slow node has started step i - k
(start times are a safe lower bound: a step's tokens are sent during its
``session.run``, after its recorded start). Without the bound (``sync=False``)
the fast node runs far ahead, which the same check must catch.
"""
import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "staleness_script.py")
SPEC = os.path.join(os.path.dirname(HERE), "resource_specs", "loopback_two_nodes.yml")
STEPS, SLEEP = 8, 0.4


def _run_job(out_dir, mode_args):
    """Run the chief (and through it the whole job) in its own process group; bounded by a timeout."""
    process = subprocess.Popen([sys.executable, SCRIPT, SPEC, str(out_dir), "--steps", str(STEPS),
                                "--sleep", str(SLEEP)] + mode_args, cwd=str(out_dir), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)       # the chief stops its job's processes on SIGTERM
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        pytest.fail("the two-node job did not finish within 180 s:\n" + output[-4000:])
    assert process.returncode == 0, output[-4000:]
    return [_read(out_dir / "node{}.txt".format(i)) for i in range(2)]


def _read(path):
    steps = {}
    for line in path.read_text().splitlines():
        step, start, end = line.split()
        steps[int(step)] = (float(start), float(end))
    assert sorted(steps) == list(range(STEPS)), "{}: steps {}".format(path.name, sorted(steps))
    return steps


def _violations(fast, slow, k):
    """Steps i the fast node finished before the slow node had even started step i - k."""
    return [i for i in range(k, STEPS) if fast[i][1] < slow[i - k][0]]


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_no_worker_runs_more_than_k_steps_ahead_of_the_slowest(tmp_path, k):
    chief, slow = _run_job(tmp_path, ["--staleness", str(k)])
    assert _violations(chief, slow, k) == []
    assert _violations(slow, chief, k) == []


@pytest.mark.slow
def test_without_the_bound_the_fast_worker_runs_far_ahead(tmp_path):
    chief, slow = _run_job(tmp_path, ["--async"])
    assert _violations(chief, slow, 2) != []
