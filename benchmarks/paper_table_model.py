"""AutoStrategy's cost model against the paper table: every builder of every cell priced, next to what it measured.

    python benchmarks/paper_table_model.py benchmarks/results/paper_table.json [more results ...]
    python benchmarks/paper_table_model.py paper_table.json --calibration ncf:4=~/.autodist/calibration/2a01.json

For each cell of ``paper_table.py``'s results (a family on a number of
hosts) this rebuilds the family's graph (``paper_models``) on a spec of the
cell's hosts and prices every builder as AutoStrategy does
(``strategies.cost.predict`` on the builder's plan), with the calibration
AutoStrategy priced with in that cell: the one its run recorded (results
since the ``ready`` event carries it), else ``--calibration FAMILY:HOSTS=PATH``
(a probe cache, for older results); a calibration from before the probe read
which nodes share a machine (``machines``) gets the fact of the benchmark:
every host of a cell is a namespace of this machine. Twice: with the compute AutoStrategy
estimates from the graph's float operations, and with the compute the cell
measured (one replica alone on a core, times the replicas that share it:
``shared_compute_ms``). Per cell and compute, every builder's predicted over
measured step, the plan AutoStrategy would pick and that plan's measured step
over the best builder's (its regret; "searched" is known only when the cell's
own AutoStrategy run chose it; the best builder includes the cell's
``AllReduce_<n>mib`` runs, the AllReduce builder with other buckets). Overall, the median of |log2(predicted /
measured)| per builder family. Nothing is run on a cluster: it reads the
results and imports TensorFlow here.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from step_time_run import BUCKETS  # noqa: E402

BUILDERS = ("PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce", "PartitionedAR",
            "RandomAxisPartitionAR", "Parallax")
COMPUTES = ("estimated", "measured")


def best_builder_ms(ms):
    """The fastest measured builder of a cell (``{config: median ms}``), AllReduce's bucket runs included."""
    return min((value for config, value in ms.items() if config in BUILDERS or config in BUCKETS), default=None)


def parse_calibrations(items):
    """``{(family, hosts): path}`` from ``FAMILY:HOSTS=PATH`` items."""
    found = {}
    for item in items or ():
        where, sep, path = item.partition("=")
        family, colon, hosts = where.partition(":")
        if not sep or not colon or not hosts.isdigit():
            raise SystemExit("paper_table_model: --calibration wants FAMILY:HOSTS=PATH, got {!r}".format(item))
        found[(family, int(hosts))] = os.path.expanduser(path)
    return found


def cell_calibration(cell, given):
    """The calibration dict AutoStrategy priced with in ``cell``: its run's record, else ``given``'s file."""
    for run in cell["runs"].get("AutoStrategy", []):
        if run.get("ready", {}).get("calibration"):
            return run["ready"]["calibration"], "recorded"
    path = given.get((cell["family"], cell["hosts"]))
    if path is None:
        return None, None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle), path


def write_spec(directory, cell):
    """A spec of the cell's cluster (``autodist cluster``'s addresses, its replicas and link rate)."""
    import yaml
    nodes = [dict(address="10.77.0.{}".format(i + 1), cpus=list(range(cell.get("replicas", 1))),
                  network_bandwidth=cell["rate"] / 1e9, **({"chief": True} if i == 0 else {"ssh_config": "nodes"}))
             for i in range(cell["hosts"])]
    path = os.path.join(directory, "{}-{}.yml".format(cell["family"], cell["hosts"]))
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump({"nodes": nodes, "ssh": {"nodes": {"username": "root"}}}, handle)
    return path


def capture(family, spec_path):
    """The family's GraphItem as the benchmark's autodist role builds it (SGD on its loss)."""
    import tensorflow as tf
    import autodist
    from autodist import strategies
    from paper_models import FAMILIES
    from step_time_models import graph_logits, loss
    from step_time_roles import _placeholders
    model = FAMILIES[family]
    ad = autodist.AutoDist(spec_path, strategies.PSLoadBalancing())
    with tf.Graph().as_default(), ad.scope():
        x, y = _placeholders(tf, model)
        tf.compat.v1.train.GradientDescentOptimizer(model.learning_rate).minimize(
            loss(model, graph_logits(model, x), y))
    return ad.graph_item, ad.resource_spec, model


def measured_ms(cell):
    """``{config: median ms}`` of the cell, as the table reports it."""
    from paper_table_report import cell_rows
    return {row["config"]: row["median_ms"] for row in cell_rows(cell)}


def price_cell(cell, calibration_dict, directory):
    """``{compute: {"builders": {name: [measured, predicted]}, "pick": ..., "regret": ...}}`` of one cell."""
    import dataclasses
    from autodist import strategies
    from autodist.strategies.cost import Calibration, predict
    from autodist.strategies.cost.compute import estimate_compute
    from autodist.strategies.inputs import batch_statistics, builder_variables
    item, spec, model = capture(cell["family"], write_spec(directory, cell))
    calibration = Calibration.from_dict(calibration_dict).rounded()
    if not calibration.machines:   # a probe before PROBE_VERSION 8; the cell's hosts were this machine's namespaces
        calibration = dataclasses.replace(calibration, machines={address: "emulated" for address in spec.nodes})
    variables, statistics_ = builder_variables(item), batch_statistics(item)
    estimated = estimate_compute(item, calibration, model.batch)
    computes = {"estimated": estimated,
                "measured": dataclasses.replace(estimated, step_s=cell["shared_compute_ms"] / 1e3)}
    ms = measured_ms(cell)
    chosen = {run.get("ready", {}).get("chosen") for run in cell["runs"].get("AutoStrategy", [])}
    best = best_builder_ms(ms)
    found = {}
    for name, compute in computes.items():
        builders = {}
        for builder in BUILDERS:
            plan = getattr(strategies, builder)().build(item, spec)
            step = predict(plan, variables, compute, calibration, chief=spec.chief, statistics=statistics_).step_s
            builders[builder] = [ms.get(builder), step * 1e3]
        pick = strategies.AutoStrategy(calibration=calibration, compute=compute,
                                       batch=model.batch).search(item, spec).chosen
        # a searched plan, and AutoStrategy's AllReduce (buckets closed by bytes alone, ``auto.FUSE_ALL``, where
        # the AllReduce builder keeps 128 members a group), were measured only as the cell's own AutoStrategy
        # run, which priced with the estimate
        ran = name == "estimated" and chosen == {pick}
        own = pick not in BUILDERS or pick == "AllReduce"
        picked = (ms.get("AutoStrategy") if ran else None) if own else ms.get(pick)
        found[name] = {"compute_ms": compute.step_s * 1e3, "builders": builders, "pick": pick,
                       "regret": picked / best if picked and best else None}
    return found


def _log_error(pair):
    measured, predicted = pair
    return abs(math.log2(predicted / measured)) if measured and predicted else None


def print_cell(cell, priced, source):
    print("\n{} on {} hosts (calibration: {}; compute estimated {:.2f} ms, measured {:.2f} ms)".format(
        cell["family"], cell["hosts"], source, priced["estimated"]["compute_ms"], priced["measured"]["compute_ms"]))
    print("  {:22s} {:>9s} {:>16s} {:>16s}".format("builder", "measured", "pred (est.)", "pred (meas.)"))
    for builder in BUILDERS:
        measured = priced["estimated"]["builders"][builder][0]
        cols = ["{:7.1f} {:5.2f}x".format(p[1], p[1] / measured) if measured else "{:7.1f}".format(p[1])
                for p in (priced[c]["builders"][builder] for c in COMPUTES)]
        print("  {:22s} {:>9s} {:>16s} {:>16s}".format(builder, "{:.1f}".format(measured) if measured else "-",
                                                      *cols))
    for compute in COMPUTES:
        regret = priced[compute]["regret"]
        print("  pick with {} compute: {} ({})".format(compute, priced[compute]["pick"],
                                                       "{:.2f}x the best builder".format(regret) if regret
                                                       else "not measured"))


def summary(cells):
    """Per compute: the median |log2 error| over all builders and cells, and every pick's regret."""
    found = {}
    for compute in COMPUTES:
        errors = [e for c in cells for e in map(_log_error, c["priced"][compute]["builders"].values())
                  if e is not None]
        regrets = [c["priced"][compute]["regret"] for c in cells]
        found[compute] = {"median_abs_log2_error": statistics.median(errors) if errors else None,
                          "regrets": regrets}
        print("{} compute: median |log2(pred / meas)| {:.2f} over {} rows; picks' regret {}".format(
            compute, found[compute]["median_abs_log2_error"] or float("nan"), len(errors),
            " ".join("-" if r is None else "{:.2f}".format(r) for r in regrets)))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="paper_table.py results (JSON)")
    parser.add_argument("--calibration", action="append", metavar="FAMILY:HOSTS=PATH",
                        help="the probe cache a cell's AutoStrategy used, where its run did not record it")
    parser.add_argument("--label", default="paper_table_model")
    args = parser.parse_args(argv)
    from autodist.runner.console import quiet_tensorflow_start
    quiet_tensorflow_start()   # this process imports TensorFlow (the families' counts): no start-up chatter
    given = parse_calibrations(args.calibration)
    cells = []
    with tempfile.TemporaryDirectory() as directory:
        for path in args.results:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            for cell in record["results"]["cells"]:
                if "rate" not in cell:
                    continue   # a cell stopped before its compute was measured
                calibration, source = cell_calibration(cell, given)
                if calibration is None:
                    print("\n{} on {} hosts: skipped, no calibration (pass --calibration {}:{}=PATH)".format(
                        cell["family"], cell["hosts"], cell["family"], cell["hosts"]))
                    continue
                with contextlib.redirect_stdout(sys.stderr):   # autodist's capture says nothing; TF might
                    priced = price_cell(cell, calibration, directory)
                print_cell(cell, priced, source)
                cells.append({"family": cell["family"], "hosts": cell["hosts"], "calibration": source,
                              "priced": priced})
    print()
    _results.save(args.label, {"argv": sys.argv[1:] if argv is None else argv, "cells": cells,
                               "summary": summary(cells)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
