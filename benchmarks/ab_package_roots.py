"""Before/after of two checkouts: ``step_time.py`` runs alternating between two package roots.

    python benchmarks/ab_package_roots.py ../before-checkout . --models tiny cnn \
        --configs mwms_25mib PS AllReduce --pairs 3

Each pair is one ``step_time.py --rounds 1`` run with ``--package-root A`` and one with
``--package-root B``, in alternating order (A B, B A, A B, ...), so that a machine drifting
during the comparison moves both sides alike. Every run measures its own baselines; the
table gives, per model, configuration and checkout, the median over the runs of their
median step time and of their p90, each run's median and p90, the median ratio to the run's best baseline and the
median CPU time per step. Run it from a directory outside both checkouts (e.g. ``/tmp``) so
that every job imports the autodist of its ``--package-root``. Results go to
``benchmarks/results/<label>.json``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402

STEP_TIME = os.path.join(HERE, "step_time.py")


def run_once(root, args, scratch):
    """One ``step_time.py`` run of every model and configuration with ``root``'s autodist: its rows."""
    argv = [sys.executable, STEP_TIME, "--models", *args.models, "--configs", *args.configs, "--rounds", "1",
            "--package-root", root, "--label", "run", "--results-dir", scratch]
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit("step_time.py failed with {} for {}: {}".format(done.returncode, root, done.stderr[-2000:]))
    with open(os.path.join(scratch, "run.json")) as handle:
        return json.load(handle)["results"]["rows"]


def summary(runs):
    """``{(model, config, root): {...}}`` over the runs' rows."""
    found = {}
    for root, rows in runs:
        for row in rows:
            found.setdefault((row["model"], row["config"], root), []).append(row)
    table = {}
    for key, rows in found.items():
        def median(field):
            values = [r[field] for r in rows if r.get(field) is not None]
            return statistics.median(values) if values else None
        table[key] = {"median_ms": median("median_ms"), "runs_ms": [r["median_ms"] for r in rows],
                      "p90_ms": median("p90_ms"), "runs_p90_ms": [r.get("p90_ms") for r in rows],
                      "errors": [e for r in rows for e in r.get("errors") or ()],
                      "ratio": median("ratio"), "cpu_ms": (median("cpu_s_per_step") or 0.0) * 1e3}
    return table


def _ms(value, digits=3):
    return "-" if value is None else "{:.{}f}".format(value, digits)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="package root A (a checkout)")
    parser.add_argument("after", help="package root B")
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--configs", nargs="+", required=True, help="step_time.py's configurations")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3000.0, help="s one step_time.py run may take")
    parser.add_argument("--label", default="ab_package_roots")
    args = parser.parse_args(argv)
    roots = [os.path.abspath(args.before), os.path.abspath(args.after)]
    runs = []
    with tempfile.TemporaryDirectory(prefix="ab-roots-") as scratch:
        for pair in range(args.pairs):
            for root in (roots if pair % 2 == 0 else roots[::-1]):
                print("pair {}/{}: {}".format(pair + 1, args.pairs, root), flush=True)
                runs.append((root, run_once(root, args, scratch)))
    table = summary(runs)
    _results.save(args.label, {"roots": {"before": roots[0], "after": roots[1]}, "pairs": args.pairs,
                               "rows": [dict(model=m, config=c, side="before" if r == roots[0] else "after", **row)
                                        for (m, c, r), row in sorted(table.items())]})
    print("{:<6} {:<22} {:<7} {:>9} {:>9} {:>7} {:>8}  runs (median/p90)".format(
        "model", "config", "side", "median", "p90", "ratio", "CPU ms"))
    for (model, config, root), row in sorted(table.items()):
        side = "before" if root == roots[0] else "after"
        print("{:<6} {:<22} {:<7} {:>9} {:>9} {:>7} {:>8.2f}  {}".format(
            model, config, side, _ms(row["median_ms"]), _ms(row["p90_ms"]),
            "-" if row["ratio"] is None else "{:.3f}".format(row["ratio"]), row["cpu_ms"],
            " ".join("failed" if ms is None else "{:.2f}/{}".format(ms, _ms(p90, 2))
                     for ms, p90 in zip(row["runs_ms"], row["runs_p90_ms"]))))
        for error in row["errors"]:
            print("    ! " + (error if len(error) < 400 else error[:400] + " ..."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
