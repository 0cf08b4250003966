"""``autodist calibrate``: the probe over the loopback cluster (slow), ``--show`` and the duplex arithmetic."""
import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

from autodist import cli
from autodist.strategies.cost.probe import _duplex

TWO_NODES = str(pathlib.Path(__file__).resolve().parents[2] / "resource_specs" / "loopback_two_nodes.yml")


def test_duplex_from_one_way_and_both_ways():
    assert _duplex(1.0, 1.0) == 1.0     # both ways as fast as one: full duplex
    assert _duplex(1.0, 2.0) == 0.0     # twice as long: one direction after the other
    assert _duplex(1.0, 1.5) == 0.5
    assert _duplex(1.0, 0.8) == 1.0 and _duplex(1.0, 3.0) == 0.0 and _duplex(0.0, 1.0) == 1.0


def test_show_prints_the_prior_without_probing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["calibrate", "-r", TWO_NODES, "--show", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["calibration"] == data["prior"] and data["calibration"]["source"] == "prior"
    assert data["path"].startswith(str(tmp_path))
    assert not os.path.exists(data["path"])


@pytest.mark.slow
def test_probe_of_the_loopback_cluster_is_cached_privately(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "autodist", "calibrate", "-r", TWO_NODES, "--repeats", "3",
                           "--format", "json"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    found = data["calibration"]
    assert found["source"] == "probe"
    assert found["rpc_bandwidth"] > 0 and found["collective_bandwidth"] > 0 and found["round_trip_s"] >= 0
    assert 0.0 <= found["rpc_duplex"] <= 1.0 and found["overlap"] == 0.0
    assert stat.S_IMODE(os.stat(os.path.dirname(data["path"])).st_mode) == 0o700
    assert json.loads(pathlib.Path(data["path"]).read_text()) == found
    shown = subprocess.run([sys.executable, "-m", "autodist", "calibrate", "-r", TWO_NODES, "--show", "--format",
                            "json"], env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(shown.stdout)["calibration"] == found
