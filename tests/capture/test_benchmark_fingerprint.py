"""benchmarks/fingerprint.py keeps working (tiny size; times are printed and saved, never asserted)."""
import importlib.util
import json
import os
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "fingerprint.py")


def test_smoke_run_writes_results(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("fingerprint_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys.modules["_results"], "RESULTS_DIR", str(tmp_path))
    results = bench.main(["--variables", "20", "--repeat", "1"])
    saved = json.loads((tmp_path / "fingerprint.json").read_text())["results"]
    assert saved["variables"] == 20 and saved["agreed"] and len(saved["runs"]) == 1
    assert saved["difference"] == results["difference"] == (
        "the optimizer GradientDescentOptimizer's learning_rate: 0.1 on the chief, 0.5 here")
    assert "bytes shipped" in capsys.readouterr().out
