"""``autodist run``'s settings out of range are refused before anything runs (exit 2), and so are
``AutoDist(...)``'s (``ArgumentError``); Ctrl-C ends any command without a traceback (issue 33, items 8, 9)."""
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from autodist import cli
from autodist.errors import ArgumentError
from autodist.runtime.recovery.restart import ATTEMPT_ENV

SPECS = pathlib.Path(__file__).resolve().parents[2] / "resource_specs"
TWO_NODES = str(SPECS / "loopback_two_nodes.yml")


@pytest.fixture
def script(tmp_path):
    """A script that must never run: refused options stop before it."""
    path = tmp_path / "train.py"
    path.write_text("raise SystemExit('the script ran')\n")
    return str(path)


@pytest.mark.parametrize("options, message", [
    (["--max-restarts", "1", "--restart-backoff", "inf"], "argument --restart-backoff: the value must be a number "
                                                         "of seconds from 0 to 604800"),
    (["--restart-backoff", "nan"], "argument --restart-backoff: the value must be a number of seconds"),
    (["--restart-backoff", "-1"], "argument --restart-backoff: the value must be a number of seconds"),
    (["--steps", "-3"], "argument --steps: the value must be a whole number >= 1, got -3"),
    (["--steps", "0"], "argument --steps: the value must be a whole number >= 1, got 0"),
    (["--stall-timeout", "1e-9"], "argument --stall-timeout: the value must be a number of seconds from 4 to"),
    (["--stall-timeout", "inf"], "argument --stall-timeout: the value must be a number of seconds"),
    (["--min-nodes", "0", "--max-restarts", "1"], "argument --min-nodes: the value must be a whole number >= 1"),
    (["--accumulation-steps", "99999999999999999999"], "argument --accumulation-steps: the value must be a whole "
                                                       "number from 1 to 2147483647"),
    (["--elastic", "--preemption-signal", "9"], "--preemption-signal: '9' is not a signal a process can handle"),
    (["--elastic", "--preemption-signal", "19"], "--preemption-signal: '19' is not a signal a process can handle"),
], ids=["backoff-inf", "backoff-nan", "backoff-negative", "steps-negative", "steps-zero", "stall-tiny",
        "stall-inf", "min-nodes-zero", "accumulation-huge", "preemption-sigkill-number", "preemption-sigstop-number"])
def test_out_of_range_options_exit_2_at_parse_time(capsys, script, options, message):
    assert cli.main(["run", "-r", TWO_NODES] + options + [script]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "the script ran" not in err


def test_more_min_nodes_than_the_spec_has_is_refused_with_or_without_restarts(capsys, script, monkeypatch):
    monkeypatch.delenv(ATTEMPT_ENV, raising=False)
    assert cli.main(["run", "-r", TWO_NODES, "--max-restarts", "1", "--min-nodes", "5", script]) == 2
    assert capsys.readouterr().err == ("autodist: error: --min-nodes is 5 but the resource spec has 2 node(s): a job "
                                       "can never keep more nodes than it has; give at most 2\n")
    assert cli.main(["run", "-r", TWO_NODES, "--min-nodes", "1", script]) == 2
    assert "autodist: error: --min-nodes acts when a job restarts" in capsys.readouterr().err


def test_a_supervised_attempt_takes_min_nodes_without_max_restarts(capsys, monkeypatch):
    from autodist.cli.run import _node_count
    from autodist.runtime.limits import check_min_nodes
    monkeypatch.setenv(ATTEMPT_ENV, "2")
    assert check_min_nodes(1, _node_count(TWO_NODES), os.environ.get(ATTEMPT_ENV)) == 1


@pytest.mark.parametrize("arguments, message", [
    (dict(max_restarts=1, restart_backoff=math.inf), "restart_backoff must be a number of seconds from 0 to"),
    (dict(total_steps=-3), "total_steps must be a whole number >= 1, got -3"),
    (dict(total_steps=2.5), "total_steps must be a whole number >= 1, got 2.5"),
    (dict(stall_timeout=1e-9), "stall_timeout must be a number of seconds from 4 to"),
    (dict(max_restarts=-1), "max_restarts must be a whole number >= 0, got -1"),
    (dict(max_restarts=1, min_nodes=5), "min_nodes is 5 but the resource spec has 2 node(s)"),
    (dict(min_nodes=1), "min_nodes acts when a job restarts (it leaves out unreachable nodes then): give "
                        "max_restarts too"),
], ids=["backoff-inf", "steps-negative", "steps-float", "stall-tiny", "restarts-negative", "min-nodes-5",
        "min-nodes-without-restarts"])
def test_the_api_refuses_the_same_values_before_anything_starts(monkeypatch, arguments, message):
    from autodist import AutoDist
    monkeypatch.delenv(ATTEMPT_ENV, raising=False)
    with pytest.raises(ArgumentError) as refused:
        AutoDist(TWO_NODES, **arguments)
    assert message in str(refused.value)
    assert isinstance(refused.value, ValueError)


def _read_lines(stream, lines):
    for line in stream:
        lines.append(line)


@pytest.mark.slow
def test_ctrl_c_during_calibrate_exits_130_without_a_traceback(tmp_path):
    """Before: a KeyboardInterrupt traceback (the status was right). The probe's job on the two loopback nodes
    is interrupted once it has launched (its first line is on stderr), and every process of it is stopped."""
    import threading
    env = dict(os.environ, HOME=str(tmp_path))   # the calibration cache stays in this test's directory
    probe = subprocess.Popen([sys.executable, "-m", "autodist", "calibrate", "-r", TWO_NODES, "--repeats", "100000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    reader = threading.Thread(target=_read_lines, args=(probe.stderr, lines), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any(line.startswith("[autodist] job ") for line in lines) and probe.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert any(line.startswith("[autodist] job ") for line in lines), "".join(lines)[-3000:]
        time.sleep(1.0)   # into the probe
        probe.send_signal(signal.SIGINT)
        probe.wait(timeout=120)
        reader.join(30)
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait(timeout=30)
        probe.stdout.close()
    err = "".join(lines)
    assert probe.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "autodist: interrupted"
