"""Shared helper: print a benchmark's results and save them as JSON under benchmarks/results/."""
import json
import os
import platform
import time

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def save(name, results):
    """Write ``results`` (JSON-serializable) to benchmarks/results/<name>.json and print the path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    record = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": platform.machine(),
              "cpus": os.cpu_count(), "results": results}
    path = os.path.join(RESULTS_DIR, name + ".json")
    with open(path + ".tmp", "w") as f:   # whole or not at all: a run stopped mid-write keeps the last record
        json.dump(record, f, indent=2)
    os.replace(path + ".tmp", path)
    print("saved", path)
    return path
