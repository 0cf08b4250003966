"""benchmarks/transport_floor.py keeps working: a short run of every mode (no timing asserted)."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "transport_floor.py")


@pytest.mark.slow
def test_every_mode_runs_and_is_saved(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--calls", "20", "--results-dir", str(tmp_path), "--label", "smoke"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = json.loads((tmp_path / "smoke.json").read_text())["results"]
    assert sorted(saved["modes"]) == sorted(["local", "remote_read", "push_pull", "all_gather", "ring_reduce"])
    for mode, found in saved["modes"].items():
        assert found["calls"] == (20 if mode in ("remote_read", "push_pull") else 40)
        assert 0 < found["median_ms"] <= found["p90_ms"], mode
        assert "  {:<12} median".format(mode) in done.stdout
