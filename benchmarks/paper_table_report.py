"""The paper table's rows, goals, text table, Markdown and plots, from ``paper_table.py``'s record.

    report(record, out_dir, label)    prints every cell's table and the goals, writes <label>.md and one
                                      <label>-<family>.png per family (examples/s per host and efficiency
                                      against hosts, one line per plan, the anchors dashed)

    python benchmarks/paper_table_report.py --label paper_table_all results/a.json results/b.json
                                      one report of several runs' cells; a cell (family, hosts,
                                      replicas) in more than one file is taken from the last
    python benchmarks/paper_table_report.py --label paper_table_full results/paper_table_full.json
                                      one record's tables and plots drawn again (this report's
                                      columns); its JSON is left as it is

A row is one configuration of one cell (a family at a number of hosts), over
every round's timed steps; see ``paper_table``'s docstring for the columns.
"""
import argparse
import json
import os
import statistics
import sys

ANCHORS = ("hand_ps", "mwms_25mib")
SPARSE = ("bert", "ncf")
GOALS = {"auto": 1.05, "sparse": 1.0 / 1.3, "dense": 1.0, "bound": 1.2}

__all__ = ["apart", "cell_key", "cell_rows", "goals", "job_cpus", "load_record", "report", "merged", "verdict",
           "with_cpus"]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _busiest(run, duplex=1.0):
    """A step's bytes on the busiest link: a node's larger direction, and of the other what a link that is not
    full duplex (``duplex`` < 1, the probe's ``rpc_duplex``) cannot move at the same time."""
    steps = max(1, len(run["ms"]))
    return max(max(moved) + (1.0 - duplex) * min(moved) for moved in run["node_bytes"].values()) / steps


def _chosen(ready):
    """The plan AutoStrategy chose in a run, with the bucket size it priced AllReduce at (``AllReduce 16 MiB``;
    records before the candidates carried their arguments name the plan alone), and ``(prior)`` when it planned
    with the spec's prior figures: its probe failed or ran out of time (8 hosts at 616 Mbit/s outran 300 s,
    docs/performance.md phase 13), so the plan was priced with the prior, not this cluster's measured figures."""
    candidates = {c["name"]: c for c in ready.get("auto", {}).get("candidates", ())}
    bucket = (candidates.get(ready["chosen"], {}).get("arguments") or {}).get("bucket_bytes")
    chosen = ready["chosen"]
    if bucket:
        from autodist.strategies.report import exact_bytes
        chosen = "{} {}".format(chosen, exact_bytes(bucket))
    if (ready.get("calibration") or {}).get("source") == "prior":
        chosen += " (prior)"
    return chosen


def _cpu_wall(run):
    """The wall time a run's ``cpu_s`` was counted over; runs recorded before it was kept: worker 0's timed steps
    (the other workers can lead or trail them by a step, so those runs' ``cpu busy`` can come above 1.0)."""
    return run.get("cpu_wall_s") or sum(run["ms"]) / 1e3


def job_cpus(hosts, cores, pin):
    """The cores a job of ``hosts`` can run on, on a machine of ``cores``: a host's processes share one core when
    pinned (``paper_table.py --pin``)."""
    return min(hosts, cores) if pin else cores


def _row(cell, config, runs):
    ms = [t for run in runs for t in run["ms"]]
    step = statistics.median(ms)
    rounds = [statistics.median(run["ms"]) for run in runs]
    busiest = _median([_busiest(run) for run in runs])
    on_wire = _median([_busiest(run, cell.get("duplex", 1.0)) for run in runs])
    bound = cell["shared_compute_ms"] + 1e3 * on_wire * 8 / _link_rate(cell)
    ready = [run.get("ready", {}) for run in runs]
    plan = _median([r.get("plan_s", 0.0) + r.get("transform_s", 0.0) if "plan_s" in r else None for r in ready])
    chosen = sorted({_chosen(r) for r in ready if r.get("chosen")})
    measured = [run for run in runs if run.get("cpu_s") is not None and run["ms"]]
    busy = (sum(run["cpu_s"] for run in measured) / (cell["cpus"] * sum(_cpu_wall(run) for run in measured))
            if measured and cell.get("cpus") else None)
    return {"config": config, "median_ms": step, "rounds": len(runs), "round_ms": rounds,
            "spread": max(rounds) / min(rounds) if len(rounds) > 1 and min(rounds) > 0 else None,
            "examples_per_s_per_host": 1e3 * cell["replicas"] * cell["batch"] / step,
            "efficiency": cell["shared_compute_ms"] / step, "busiest_bytes": busiest, "bound_ms": bound,
            "x_bound": step / bound, "plan_transform_s": plan, "startup_s": _median([r.get("startup_s") for r in ready]),
            "peak_rss_bytes": max(max(run.get("peak_rss", {0: 0}).values()) for run in runs), "cpu_busy": busy,
            "chosen": "/".join(chosen) or None, "errors": cell["errors"].get(config, [])}


def cell_rows(cell):
    """The cell's rows, each with ``ratio``: its step over the best anchor's."""
    rows = [_row(cell, config, runs) for config, runs in cell["runs"].items() if runs]
    anchors = [r["median_ms"] for r in rows if r["config"] in ANCHORS]
    best = min(anchors) if anchors else None
    for row in rows:
        row["ratio"] = row["median_ms"] / best if best else None
    failed = [c for c in cell["errors"] if c not in cell["runs"]]
    return rows + [{"config": c, "median_ms": None, "errors": cell["errors"][c]} for c in failed]


def apart(one, other):
    """Whether two rows' rounds do not overlap (every round of one faster than every round of the other); None
    where either has one round. Two plans whose rounds overlap are not told apart by this run: on this machine
    two rounds of one plan have differed by up to 1.49x (docs/performance.md phase 10)."""
    first, second = one.get("round_ms") or (), other.get("round_ms") or ()   # a failed row has none
    if len(first) < 2 or len(second) < 2:
        return None
    return max(first) < min(second) or max(second) < min(first)


def goals(cells):
    """``[(goal, value, met, apart)]`` of issue 40 over the cells that have the rows to judge; ``apart``: for a
    goal comparing two rows, whether their rounds are told apart (``apart``), else None."""
    found = []
    for cell in cells:
        rows = {r["config"]: r for r in cell_rows(cell) if r["median_ms"] is not None}
        where = "{} on {} hosts".format(cell["family"], cell["hosts"])
        builders = [r for c, r in rows.items() if c not in ANCHORS and c != "AutoStrategy"]
        best = min(builders, key=lambda r: r["median_ms"]) if builders else None
        if best and "AutoStrategy" in rows:
            auto = rows["AutoStrategy"]
            value = auto["median_ms"] / best["median_ms"]
            found.append(("{}: AutoStrategy / best builder ({}) <= {}".format(where, best["config"], GOALS["auto"]),
                          value, value <= GOALS["auto"], apart(auto, best)))
        plans = builders + ([rows["AutoStrategy"]] if "AutoStrategy" in rows else [])
        anchors = [r for c, r in rows.items() if c in ANCHORS]
        if plans and anchors and cell["hosts"] >= 4:
            plan, anchor = (min(group, key=lambda r: r["median_ms"]) for group in (plans, anchors))
            value = plan["median_ms"] / anchor["median_ms"]
            want = GOALS["sparse"] if cell["family"] in SPARSE else GOALS["dense"]
            found.append(("{}: best plan / best anchor <= {:.2f}".format(where, want), value, value <= want,
                          apart(plan, anchor)))
        for row in rows.values():
            busy = "" if row["cpu_busy"] is None else " (cores {:.0%} busy)".format(row["cpu_busy"])
            found.append(("{}: {} / its lower bound <= {}{}".format(where, row["config"], GOALS["bound"], busy),
                          row["x_bound"], row["x_bound"] <= GOALS["bound"], None))
    return found


def verdict(met, separated, yes="met", no="NOT met"):
    """A goal's word: met or not, and whether the rows it compares are told apart by their rounds (``apart``)."""
    word = yes if met else no
    return word if separated is None else "{} ({})".format(word, "rounds apart" if separated else "rounds overlap")


_COLUMNS = (("config", "{}", 20), ("median_ms", "{:.1f}", 10), ("examples_per_s_per_host", "{:.1f}", 9),
            ("efficiency", "{:.2f}", 5), ("busiest_bytes", "{:.3g}", 9), ("bound_ms", "{:.1f}", 9),
            ("x_bound", "{:.2f}", 6), ("plan_transform_s", "{:.2f}", 7), ("startup_s", "{:.1f}", 7),
            ("peak_rss_bytes", "{:.3g}", 9), ("cpu_busy", "{:.2f}", 8), ("ratio", "{:.2f}", 6), ("spread", "{:.2f}", 6),
            ("chosen", "{}", 24))
_HEADS = ("config", "ms/step", "ex/s/host", "eff", "busiest B", "bound ms", "x bnd", "plan s", "start s",
          "peak mem", "cpu busy", "ratio", "spread", "AutoStrategy")


def _cells_text(row):
    return [("-" if row.get(key) is None else fmt.format(row[key])) for key, fmt, _ in _COLUMNS]


def _link_rate(cell):
    """The bound's link: the shaped rate, or the probe's slowest link where the machine could not fill it."""
    return min(cell["rate"], cell.get("link_rate") or cell["rate"])


def _links(cell):
    """The links' rate as set, and as probed where the bound takes the probe's (and its duplex below 1)."""
    probed, duplex = _link_rate(cell), cell.get("duplex", 1.0)
    return "{:.0f} Mbit/s{}{}".format(cell["rate"] / 1e6, ", {:.0f} probed".format(probed / 1e6)
                                      if probed < cell["rate"] else "",
                                      ", duplex {:.2f}".format(duplex) if duplex < 1.0 else "")


def table_text(cell):
    lines = ["{} on {} hosts x {} replica(s): compute {:.1f} ms ({:.1f} shared), links {}, "
             "paper ratio {:.2f}".format(cell["family"], cell["hosts"], cell["replicas"], cell["compute_ms"],
                                         cell["shared_compute_ms"], _links(cell), cell["paper_ratio"])]
    lines.append(" ".join("{:>{}}".format(h, w) if i else "{:<{}}".format(h, w)
                          for i, (h, (_, _, w)) in enumerate(zip(_HEADS, _COLUMNS))))
    for row in cell_rows(cell):
        texts = _cells_text(row)
        lines.append(" ".join("{:>{}}".format(t, w) if i else "{:<{}}".format(t, w)
                              for i, (t, (_, _, w)) in enumerate(zip(texts, _COLUMNS))))
        lines += ["    ! " + e[:300] for e in row.get("errors") or ()]
    return "\n".join(lines)


def markdown(cells, checked):
    out = []
    for cell in cells:
        out.append("### {} on {} hosts ({} replica(s) each; links {}; compute {:.1f} ms, {:.1f} shared)"
                   .format(cell["family"], cell["hosts"], cell["replicas"], _links(cell), cell["compute_ms"],
                           cell["shared_compute_ms"]))
        out.append("")
        out.append("| " + " | ".join(_HEADS) + " |")
        out.append("|" + "---|" * len(_HEADS))
        out += ["| " + " | ".join(_cells_text(row)) + " |" for row in cell_rows(cell) if row["median_ms"] is not None]
        out.append("")
    out.append("cpu busy: the share of the job's cores its processes kept busy over the timed steps; near 1.0 the "
               "cores, not the links, set the step (the bound counts only the model's compute on them). Runs "
               "recorded before 2 December 2026 divide by worker 0's steps, which the others can lead or trail "
               "by a step: up to a few per cent above 1.0 is all busy there.")
    out.append("")
    out.append("spread: a row's slowest round over its fastest (median steps). A goal comparing two rows says "
               "whether their rounds are apart (every round of one faster than every round of the other) or "
               "overlap (this run does not tell them apart).")
    out.append("")
    out.append("| goal | value | met |")
    out.append("|---|---:|---|")
    out += ["| {} | {:.3f} | {} |".format(goal, value, verdict(met, separated, yes="yes", no="**no**"))
            for goal, value, met, separated in checked]
    return "\n".join(out) + "\n"


def plot(cells, family, path):
    """Examples/s per host and efficiency against hosts, one line per plan; the anchors dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mine = sorted((c for c in cells if c["family"] == family), key=lambda c: c["hosts"])
    series = {}
    for cell in mine:
        for row in cell_rows(cell):
            if row["median_ms"] is not None:
                series.setdefault(row["config"], []).append((cell["hosts"], row["examples_per_s_per_host"],
                                                             row["efficiency"]))
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for config, points in sorted(series.items()):
        hosts, rate, efficiency = zip(*points)
        style = dict(linestyle="--", marker="s", linewidth=2) if config in ANCHORS else dict(linestyle="-", marker="o")
        left.plot(hosts, rate, label=config, **style)
        right.plot(hosts, efficiency, label=config, **style)
    for axis, title in ((left, "examples/s per host"), (right, "efficiency (compute share of a step)")):
        axis.set_xlabel("hosts")
        axis.set_title(title)
        axis.set_xticks(sorted({c["hosts"] for c in mine}))
        axis.grid(alpha=0.3)
    left.set_ylim(bottom=0)
    right.set_ylim(0, 1.05)
    handles, labels = left.get_legend_handles_labels()   # below the axes: a legend inside hides the top points
    figure.legend(handles, labels, loc="lower center", ncol=min(6, max(1, len(labels))), fontsize=7)
    fixed = sorted({c["rate"] for c in cells if c["family"] == family and c.get("fixed_rate")})
    figure.suptitle("{} ({})".format(family, "links at {} Mbit/s, set by --rate".format(
        "/".join("{:.0f}".format(r / 1e6) for r in fixed)) if fixed else "emulated at the paper's compute-to-wire ratio"))
    figure.tight_layout(rect=(0, 0.1 + 0.04 * (len(labels) > 6), 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def with_cpus(cell, record):
    """``cell`` with the cores its job could use (``cpus``): recorded since the column came, else from the record
    (its cores; a pinned host's processes share one)."""
    if "cpus" in cell or not record.get("cores"):
        return cell
    return dict(cell, cpus=job_cpus(cell["hosts"], record["cores"], record.get("settings", {}).get("pin", True)))


def report(record, out_dir, label):
    """Print the tables and goals; write ``<label>.md`` and the plots into ``out_dir``; returns their paths."""
    cells = [with_cpus(cell, record) for cell in record["cells"]]
    for cell in cells:
        print("\n" + table_text(cell))
    checked = goals(cells)
    print("\ngoals (issue 40):")
    for goal, value, met, separated in checked:
        print("  {:<78} {:>7.3f}  {}".format(goal, value, verdict(met, separated)))
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, label + ".md")]
    with open(paths[0], "w") as handle:
        handle.write(markdown(cells, checked))
    for family in sorted({c["family"] for c in cells}):
        paths.append(plot(cells, family, os.path.join(out_dir, "{}-{}.png".format(label, family))))
    print("\n" + "\n".join("wrote " + p for p in paths))
    return paths


def cell_key(cell):
    """What names a cell: (family, hosts, replicas per host)."""
    return cell["family"], cell.get("hosts"), cell.get("replicas", 1)


def load_record(path):
    """The record of a ``paper_table.py`` results file; ValueError (or OSError) where it is none."""
    with open(path) as handle:
        found = json.load(handle)
    record = found.get("results", found) if isinstance(found, dict) else None   # _results.save wraps the record
    if not isinstance(record, dict) or not isinstance(record.get("cells"), list):
        raise ValueError("no list of cells")
    return record


def merged(records):
    """The cells of several records, in order; a cell (family, hosts, replicas) seen again replaces the earlier.
    A cell of a stopped run that measured no configuration is left out."""
    cells = {}
    for record in records:
        for cell in record["cells"]:
            if any(cell.get("runs", {}).values()):
                cells[cell_key(cell)] = with_cpus(cell, record)
    return {"cells": sorted(cells.values(), key=cell_key), "merged": True}


def main(argv=None):
    parser = argparse.ArgumentParser(description="One report of several paper_table.py runs' results.")
    parser.add_argument("results", nargs="+", help="paper_table.py JSON files, oldest first")
    parser.add_argument("--label", required=True, help="name of the report's files")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    out = os.path.join(args.out, args.label + ".json")
    inputs = [p for p in args.results if os.path.abspath(p) == os.path.abspath(out)]
    if inputs and len(args.results) > 1:
        parser.error("--label {}: the merged record would replace {}, one of the files it merges; pick another "
                     "label".format(args.label, inputs[0]))
    records = []
    for path in args.results:
        try:
            records.append(load_record(path))
        except (OSError, ValueError) as e:
            parser.error("{}: not a paper_table.py results file ({}: {})".format(path, type(e).__name__, e))
    record = merged(records)
    record["sources"] = [os.path.basename(p) for p in args.results]
    if not inputs:   # a record drawn again under its own label keeps its JSON (its sessions, settings, cores)
        with open(out, "w") as handle:
            json.dump(record, handle, indent=2)
    report(record, args.out, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
