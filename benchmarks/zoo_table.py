"""The model zoo's table: for every cell (model x builder, per topology) the largest weight difference from
one device.

    python benchmarks/zoo_table.py [--full] [--float64] [-k EXPR]

Runs the zoo tier (``tests/equivalence/zoo``) with pytest, each cell recording its differences
(``AUTODIST_ZOO_TABLE``), then prints the table and saves it (``benchmarks/results/zoo_table.json``, or
``zoo_table_float64.json``). ``--full`` adds ResNet50 and MobileNetV2 under AllReduce, PSLoadBalancing and
PartitionedPS (``AUTODIST_ZOO_FULL``: minutes a cell); ``--float64`` runs in float64 (``AUTODIST_ZOO_FLOATX``),
where every cell must equal one device to 1e-9; ``-k`` selects cells as pytest's ``-k`` does.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import save  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_tier(args, table):
    env = dict(os.environ, AUTODIST_ZOO_TABLE=table)
    if args.full:
        env["AUTODIST_ZOO_FULL"] = "1"
    if args.float64:
        env["AUTODIST_ZOO_FLOATX"] = "float64"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/equivalence/zoo"]
    argv += ["-k", args.k] if args.k else []
    return subprocess.run(argv, cwd=ROOT, env=env, timeout=args.timeout).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("-k")
    parser.add_argument("--timeout", type=float, default=7200.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        table = os.path.join(directory, "cells.jsonl")
        status = run_tier(args, table)
        cells = [json.loads(line) for line in open(table)] if os.path.exists(table) else []
    print("\n{:16s} {:22s} {:16s} {:>22s} {:>18s}".format("topology", "model", "builder", "max weight difference",
                                                         "max loss (rel.)"))
    for cell in sorted(cells, key=lambda c: (c["topology"], c["model"], c["builder"])):
        print("{topology:16s} {model:22s} {builder:16s} {max_weight_difference:22.3g} "
              "{max_loss_difference:18.3g}".format(**cell))
    save("zoo_table_float64" if args.float64 else "zoo_table", {"pytest_status": status, "cells": cells})
    return status


if __name__ == "__main__":
    sys.exit(main())
