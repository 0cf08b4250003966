"""benchmarks/paper_table.py: the link-rate arithmetic, the rows and goals, the report; a --smoke run on a cluster."""
import importlib
import json
import os
import re
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
TABLE = ".md"   # the suffix of the report's table
SCRIPT = os.path.join(BENCHMARKS, "paper_table.py")


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    return importlib.import_module("paper_table")


def test_the_paper_ratios_are_the_docstrings(bench):
    """The compute-to-wire ratios of the paper's cluster, as the docstring's arithmetic states them."""
    ratios = {name: bench.paper_ratio(paper) for name, paper in bench.PAPER.items()}
    stated = {"resnet101": 17.5, "densenet121": 36, "inception3": 24, "vgg16": 11.2, "bert": 1.76, "ncf": 0.77,
              "resnet50": 16.0}
    assert ratios == pytest.approx(stated, rel=0.02)   # the docstring gives them to 2-3 significant digits
    for name, value in stated.items():
        assert "ratio {}".format(value) in bench.__doc__, name


def test_the_emulated_rate_keeps_the_ratio_and_its_bounds(bench, monkeypatch):
    monkeypatch.setattr(bench, "wire_bytes", lambda model: 1e6)
    ratio = bench.paper_ratio(bench.PAPER["bert"])
    assert bench.emulated_rate("bert", None, 0.1) == pytest.approx(1e6 * 8 * ratio / 0.1)
    assert bench.emulated_rate("bert", None, 1e-6) == bench.MAX_RATE
    assert bench.emulated_rate("bert", None, 1e6) == bench.MIN_RATE
    assert bench.sharing(8, 1, [0, 1]) == 4 and bench.sharing(2, 2, [0, 1]) == 2 and bench.sharing(1, 1, [0, 1]) == 1
    assert bench.job_cpus(8, 2, True) == 2 and bench.job_cpus(1, 2, True) == 1 and bench.job_cpus(1, 2, False) == 2


def test_a_run_times_enough_steps_to_cover_its_minimum_of_compute(bench):
    """A 1 ms step gets 500 steps' worth of a 0.5 s minimum, capped; a 100 ms step keeps --steps."""
    assert bench.timed_steps(6, 0.5, 0.001) == bench.MAX_STEPS
    assert bench.timed_steps(6, 0.5, 0.01) == 50
    assert bench.timed_steps(6, 0.5, 0.1) == 6
    assert bench.timed_steps(6, 0.0, 0.001) == 6


def _run(ms, busiest, rss=1e9, **ready):
    return {"ms": ms, "node_bytes": {"10.0.0.1": [busiest * len(ms), 1.0], "10.0.0.2": [1.0, 2.0]},
            "peak_rss": {"10.0.0.1": rss, "10.0.0.2": rss / 2}, "ready": ready}


def _cell(family="bert", hosts=4):
    return {"family": family, "hosts": hosts, "replicas": 1, "batch": 8, "compute_ms": 50.0,
            "shared_compute_ms": 100.0, "rate": 8e8, "paper_ratio": 1.76, "errors": {"PS": ["round 1: no 'ready'"]},
            "runs": {"hand_ps": [_run([300.0, 310.0], 2e6)], "mwms_25mib": [_run([200.0], 1e7)],
                     "PSLoadBalancing": [_run([150.0], 4e6, plan_s=1.0, transform_s=2.0, startup_s=30.0)],
                     "AutoStrategy": [_run([140.0], 4e6, plan_s=1.5, transform_s=2.0, startup_s=40.0,
                                           chosen="Parallax")]}}


def test_rows_carry_the_issues_columns(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import cell_rows
    rows = {row["config"]: row for row in cell_rows(_cell())}
    auto = rows["AutoStrategy"]
    assert auto["examples_per_s_per_host"] == pytest.approx(8 / 0.140)
    assert auto["efficiency"] == pytest.approx(100 / 140)
    assert auto["bound_ms"] == pytest.approx(100 + 1e3 * 4e6 * 8 / 8e8) and auto["x_bound"] == pytest.approx(140 / 140)
    assert auto["plan_transform_s"] == 3.5 and auto["startup_s"] == 40.0 and auto["chosen"] == "Parallax"
    assert auto["peak_rss_bytes"] == 1e9 and auto["ratio"] == pytest.approx(140 / 200)
    assert rows["hand_ps"]["median_ms"] == 305.0 and rows["hand_ps"]["plan_transform_s"] is None
    assert rows["PS"]["median_ms"] is None and rows["PS"]["errors"] == ["round 1: no 'ready'"]
    cell = _cell()
    priced = {"candidates": [{"name": "AllReduce", "arguments": {"bucket_bytes": 4 << 20}},
                             {"name": "searched", "arguments": None}]}
    cell["runs"]["AutoStrategy"] = [_run([140.0], 4e6, chosen="AllReduce", auto=priced),
                                    _run([150.0], 4e6, chosen="searched", auto=priced)]
    assert {row["config"]: row for row in cell_rows(cell)}["AutoStrategy"]["chosen"] == "AllReduce 4 MiB/searched"
    # a run that planned with the spec's prior (its probe failed) says so: it was not priced with this cluster's figures
    probed, prior = {"source": "probe"}, {"source": "prior"}
    cell["runs"]["AutoStrategy"] = [_run([140.0], 4e6, chosen="AllReduce", auto=priced, calibration=probed),
                                    _run([150.0], 4e6, chosen="AllReduce", auto=priced, calibration=prior)]
    assert {row["config"]: row for row in cell_rows(cell)}["AutoStrategy"]["chosen"] == \
        "AllReduce 4 MiB/AllReduce 4 MiB (prior)"


def test_a_row_says_how_busy_it_kept_the_jobs_cores_and_the_bound_goal_repeats_it(monkeypatch, tmp_path):
    """cpu busy: the job's CPU seconds over its cores times the wall time they were counted over (worker 0's
    timed steps in runs recorded before it was kept); a record from before the column gives its cells the cores
    of the record (one a host where pinned)."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import cell_rows, goals, markdown, merged, with_cpus
    cell = dict(_cell(), cpus=2)
    cell["runs"]["hand_ps"] = [dict(_run([300.0, 310.0], 2e6), cpu_s=0.9), dict(_run([200.0], 2e6), cpu_s=0.3)]
    rows = {row["config"]: row for row in cell_rows(cell)}
    assert rows["hand_ps"]["cpu_busy"] == pytest.approx(1.2 / (2 * 0.81))
    cell["runs"]["PSLoadBalancing"] = [dict(_run([150.0, 150.0], 4e6), cpu_s=0.8, cpu_wall_s=0.5)]
    assert {r["config"]: r for r in cell_rows(cell)}["PSLoadBalancing"]["cpu_busy"] == pytest.approx(0.8 / (2 * 0.5))
    assert rows["mwms_25mib"]["cpu_busy"] is None   # a run without its CPU seconds
    assert rows["hand_ps"]["median_ms"] == 300.0   # the column changes no step
    found = [g for g, _, _, _ in goals([cell]) if "lower bound" in g]
    assert "bert on 4 hosts: hand_ps / its lower bound <= 1.2 (cores 74% busy)" in found
    assert "bert on 4 hosts: mwms_25mib / its lower bound <= 1.2" in found
    assert "| 0.74 |" in markdown([cell], goals([cell]))
    assert cell_rows(_cell())[0]["cpu_busy"] is None   # a cell that does not know its cores
    old = _cell(hosts=8)
    assert with_cpus(old, {"cores": 2, "settings": {"pin": True}})["cpus"] == 2
    assert with_cpus(dict(old, hosts=1), {"cores": 2, "settings": {"pin": True}})["cpus"] == 1
    assert with_cpus(old, {"cores": 4, "settings": {"pin": False}})["cpus"] == 4
    assert with_cpus(dict(old, cpus=3), {"cores": 4})["cpus"] == 3 and "cpus" not in with_cpus(old, {})
    assert "cpus" not in old   # not mutated
    old["runs"]["hand_ps"] = [dict(_run([300.0], 2e6), cpu_s=0.3)]
    record = {"cores": 2, "settings": {"pin": True}, "cells": [old]}
    assert {r["config"]: r for r in cell_rows(merged([record])["cells"][0])}["hand_ps"]["cpu_busy"] == 0.5


def test_a_probed_link_slower_than_its_shaping_sets_the_bound(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import cell_rows, table_text
    cell = dict(_cell(), link_rate=4e8)   # shaped at 800 Mbit/s, the probe read 400
    auto = {row["config"]: row for row in cell_rows(cell)}["AutoStrategy"]
    assert auto["bound_ms"] == pytest.approx(100 + 1e3 * 4e6 * 8 / 4e8)
    assert "links 800 Mbit/s, 400 probed" in table_text(cell)
    faster = {row["config"]: row for row in cell_rows(dict(_cell(), link_rate=8e9))}["AutoStrategy"]
    assert faster["bound_ms"] == pytest.approx(100 + 1e3 * 4e6 * 8 / 8e8)   # never above the shaping
    assert "probed" not in table_text(dict(_cell(), link_rate=8e8))


def test_a_link_that_is_not_full_duplex_carries_both_directions_in_the_bound(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import cell_rows, table_text
    cell = _cell()
    cell["runs"]["PS"] = [{"ms": [200.0, 200.0], "node_bytes": {"10.0.0.1": [6e6, 2e6], "10.0.0.2": [1e6, 3e6]},
                           "ready": {}}]
    half = dict(cell, duplex=0.5)
    for duplex, wire in ((None, 3e6), (0.5, 3e6 + 0.5 * 1e6), (0.0, 4e6)):   # node 1: 3 MB one way, 1 the other
        row = {r["config"]: r for r in cell_rows(dict(cell, duplex=duplex) if duplex is not None else cell)}["PS"]
        assert row["busiest_bytes"] == 3e6   # the column: the larger direction, whatever the duplex
        assert row["bound_ms"] == pytest.approx(100 + 1e3 * wire * 8 / 8e8), duplex
    assert "duplex 0.50" in table_text(half) and "duplex" not in table_text(dict(cell, duplex=1.0))


def test_one_rate_for_every_cell_and_the_paper_families_by_default(bench):
    args = bench.options(["--rate", "10gbit", "--families", "resnet50"])
    assert args.rate == 10e9 and args.families == ["resnet50"]
    assert bench.options([]).rate is None and "resnet50" not in bench.options([]).families
    for bad in ("20gbit", "fast", "100MBps"):
        with pytest.raises(SystemExit):
            bench.options(["--rate", bad])


def test_allreduce_buckets_run_only_when_named_and_close_by_bytes_alone(bench):
    """``AllReduce_<n>mib``: AllReduce's buckets of n MiB with no member bound, the sweep of phase 6."""
    import step_time_run
    assert not any(config.startswith("AllReduce_") for config in bench.options([]).configs)
    args = bench.options(["--configs", "mwms_25mib", "AllReduce_25mib"])
    assert args.configs == ["mwms_25mib", "AllReduce_25mib"]
    from autodist.strategies.auto import FUSE_ALL
    assert step_time_run.VARIANTS["AllReduce_1mib"] == ("AllReduce", {"chunk_size": FUSE_ALL, "bucket_bytes": 1 << 20})
    with pytest.raises(SystemExit):
        bench.options(["--configs", "AllReduce_3mib"])
    from autodist.strategies.auto import BUCKET_CHOICES
    assert step_time_run.VARIANTS["AllReduce_16mib"] == ("AllReduce", {"chunk_size": FUSE_ALL,
                                                                        "bucket_bytes": BUCKET_CHOICES[0]}), \
        "AutoStrategy's own AllReduce at its default bucket"


def test_goals_follow_the_issue(monkeypatch):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import goals
    found = {goal: (value, met) for goal, value, met, _ in goals([_cell(), _cell("vgg16", 2)])}
    assert found["bert on 4 hosts: AutoStrategy / best builder (PSLoadBalancing) <= 1.05"] == (pytest.approx(140 / 150),
                                                                                               True)
    assert found["bert on 4 hosts: best plan / best anchor <= 0.77"] == (pytest.approx(0.7), True)
    assert not any(goal.startswith("vgg16 on 2 hosts: best plan") for goal in found), "4 and 8 hosts only"
    assert found["bert on 4 hosts: hand_ps / its lower bound <= 1.2"][1] is False


def test_a_goal_says_whether_the_rounds_of_the_rows_it_compares_are_apart(monkeypatch, capsys, tmp_path):
    """Two rounds of each: AutoStrategy's 140/150 against PSLoadBalancing's 120/145 overlap; against 100/110 they
    are apart. One round of a row: no word on it."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import cell_rows, goals, report

    def cell(best_rounds):
        cell = _cell()
        cell["runs"]["AutoStrategy"] = [_run([140.0], 4e6, chosen="AllReduce"),
                                        _run([150.0], 4e6, chosen="AllReduce")]
        cell["runs"]["PSLoadBalancing"] = [_run([ms], 4e6) for ms in best_rounds]
        return cell

    def auto_goal(cell):
        return [g for g in goals([cell]) if "AutoStrategy / best builder" in g[0]][0]

    overlap, apart, alone = cell([120.0, 145.0]), cell([100.0, 110.0]), cell([120.0])
    auto = {row["config"]: row for row in cell_rows(overlap)}["AutoStrategy"]
    assert auto["round_ms"] == [140.0, 150.0] and auto["spread"] == pytest.approx(150 / 140)
    assert {row["config"]: row for row in cell_rows(alone)}["PSLoadBalancing"]["spread"] is None
    assert auto_goal(overlap)[1:] == (pytest.approx(145 / 132.5), False, False)
    assert auto_goal(apart)[1:] == (pytest.approx(145 / 105), False, True)
    assert auto_goal(alone)[1:] == (pytest.approx(145 / 120), False, None)
    plan_goal = [g for g in goals([apart]) if "best plan / best anchor" in g[0]][0]   # PSLoadBalancing, mwms
    assert plan_goal[1:] == (pytest.approx(105 / 200), True, None), "one round of the anchor: no word"
    apart["runs"]["mwms_25mib"].append(_run([190.0], 1e7))
    assert [g for g in goals([apart]) if "best plan / best anchor" in g[0]][0][3] is True
    assert all(g[3] is None for g in goals([apart]) if "lower bound" in g[0])
    report({"cells": [overlap, dict(apart, hosts=8)]}, str(tmp_path), "t")
    printed = capsys.readouterr().out
    assert "NOT met (rounds overlap)" in printed and "  met (rounds apart)" in printed   # the plan goal, not "NOT met"
    assert "| **no** (rounds overlap) |" in (tmp_path / ("t" + TABLE)).read_text()


def test_the_report_writes_a_table_and_a_plot_per_family(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import report
    paths = report({"cells": [_cell(), _cell(hosts=8), _cell("vgg16", 2)]}, str(tmp_path), "t")
    table = "t" + TABLE   # the report's own file, not a document the tree cites (tests/test_references.py)
    assert sorted(os.path.basename(p) for p in paths) == ["t-bert.png", "t-vgg16.png", table]
    text = (tmp_path / table).read_text()
    assert "### bert on 8 hosts" in text and "| AutoStrategy | 140.0 |" in text
    assert (tmp_path / "t-bert.png").read_bytes()[:4] == b"\x89PNG"


def test_several_runs_make_one_report_the_later_cell_replacing_the_earlier(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(BENCHMARKS)
    from paper_table_report import main
    older, newer = _cell("bert", 4), _cell("bert", 4)
    newer["runs"]["mwms_25mib"][0]["ms"] = [180.0]
    stopped = dict(_cell("ncf", 8), runs={})   # a run stopped before its first configuration
    for name, cells in (("a", [older, _cell("vgg16", 8)]), ("b", [newer, stopped])):
        (tmp_path / (name + ".json")).write_text(json.dumps({"benchmark": name, "results": {"cells": cells}}))
    assert main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--label", "all", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "all.json").read_text())
    assert [(c["family"], c["hosts"]) for c in record["cells"]] == [("bert", 4), ("vgg16", 8)]
    assert record["cells"][0]["runs"]["mwms_25mib"][0]["ms"] == [180.0] and record["sources"] == ["a.json", "b.json"]
    assert "| mwms_25mib | 180.0 |" in (tmp_path / ("all" + TABLE)).read_text()
    assert (tmp_path / "all-vgg16.png").exists() and (tmp_path / "all-bert.png").exists()
    before = (tmp_path / "a.json").read_text()
    assert main([str(tmp_path / "a.json"), "--label", "a", "--out", str(tmp_path)]) == 0   # drawn again in place
    assert (tmp_path / "a.json").read_text() == before
    assert "| mwms_25mib | 200.0 |" in (tmp_path / ("a" + TABLE)).read_text()
    with pytest.raises(SystemExit):   # a merge that would replace one of its inputs
        main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--label", "b", "--out", str(tmp_path)])
    assert "results" in json.loads((tmp_path / "b.json").read_text())
    (tmp_path / "c.json").write_text("[]")
    for bad in ("missing.json", "c.json"):
        with pytest.raises(SystemExit):
            main([str(tmp_path / bad), "--label", "bad", "--out", str(tmp_path)])
        assert not (tmp_path / "bad.json").exists()


def test_every_family_has_the_variables_its_docstring_counts(bench):
    """Each family built in a graph, as autodist and the hand-written parameter server build it (the cluster
    run below trains one of them)."""
    from paper_models import FAMILIES, family_counts
    stated = {"resnet101": 314, "densenet121": 364, "inception3": 190, "vgg16": 32, "bert": 393, "ncf": 12,
              "resnet50": 161}
    counts = {name: family_counts(model) for name, model in FAMILIES.items()}
    assert {name: found[0] for name, found in counts.items()} == stated
    for name in stated:
        assert re.search(r"\n    {}\s+{}\s".format(name, stated[name]), sys.modules["paper_models"].__doc__), name
    sparse = {name for name, (_, params, dense, touched) in counts.items() if dense < params and touched > 0}
    assert sparse == {"bert", "ncf"}   # a huge sparse embedding; the CNNs' gradients are all dense


def test_smoke_settings_replace_the_command_lines(bench):
    args = bench.options(["--smoke", "--hosts", "8", "--rounds", "5"])
    assert {key: getattr(args, key) for key in bench.SMOKE} == bench.SMOKE and args.label == "paper_table_smoke"
    args = bench.options(["--hosts", "4", "8", "--families", "bert"])
    assert args.hosts == [4, 8] and args.families == ["bert"] and args.label == "paper_table_full" and args.rounds == 2


def test_a_configuration_that_ran_or_failed_in_a_round_is_not_pending_in_it(bench):
    cell = {"runs": {"hand_ps": [{}, {}], "PS": [{}]}, "errors": {"PS": ["round 2: boom"], "AllReduce": ["x"]}}
    configs = ["hand_ps", "PS", "AllReduce", "Parallax"]
    assert bench.pending(cell, configs, 2) == [(1, "Parallax"), (2, "Parallax"), (2, "AllReduce")]
    assert bench.pending(cell, configs, 3) == [(1, "Parallax"), (2, "Parallax"), (2, "AllReduce"), (3, "hand_ps"),
                                               (3, "PS"), (3, "AllReduce"), (3, "Parallax")]
    assert bench.pending({"family": "ncf"}, ["PS"], 1) == [(1, "PS")]


def test_even_rounds_run_the_configurations_backwards_so_none_always_runs_last(bench):
    """A run's place in its round moved its step: with one order the last configuration (AutoStrategy) paid it in
    every round; forward then backward, every configuration's mean place over two rounds is the same."""
    configs = ["hand_ps", "mwms_25mib", "AllReduce", "AutoStrategy"]
    todo = bench.pending({"family": "bert"}, configs, 2)
    assert todo == [(1, c) for c in configs] + [(2, c) for c in reversed(configs)]
    places = {c: [bench.round_order(configs, r).index(c) for r in (1, 2)] for c in configs}
    assert {sum(p) for p in places.values()} == {len(configs) - 1}
    assert bench.round_order(configs, 3) == configs and bench.round_order(configs, 4) == configs[::-1]


def test_resume_continues_only_a_record_measured_under_the_same_settings(bench, tmp_path):
    args = bench.options(["--steps", "9"])
    args.cores = [0, 1]
    path = tmp_path / "t.json"
    assert bench.resumed_record(str(path), args) is None   # nothing yet: a new table
    path.write_text(json.dumps({"results": {"cells": [], "settings": bench.settings(args), "cores": 2}}))
    assert bench.resumed_record(str(path), args)["cells"] == []
    other = bench.options([])
    other.cores = [0]
    with pytest.raises(bench.ResumeRefused, match=r"t\.json was measured under other settings: steps 6 \(recorded 9\), "
                                                  r"cores 1 \(recorded 2\)"):
        bench.resumed_record(str(path), other)
    path.write_text(json.dumps({"results": {"cells": []}}))
    with pytest.raises(bench.ResumeRefused, match="predates --resume"):
        bench.resumed_record(str(path), args)
    path.write_text("{")
    with pytest.raises(bench.ResumeRefused, match="not a paper_table.py record"):
        bench.resumed_record(str(path), args)


class _Cluster:
    """What ``run_table`` uses of ``BenchCluster``, no namespaces: the rates and specs it was given."""
    made = []

    def __init__(self, rate, args, directory, nodes=2, replicas=1):
        self.nodes, self.replicas, self.rates, self.specs, self.removed = nodes, replicas, [], [], False
        _Cluster.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.removed = True
        return False

    def reshape(self, rate):
        self.rates.append(rate)

    def use_spec(self, label):
        self.specs.append(label)


def _fake_runs(bench, monkeypatch, fail=(), interrupt=None):
    """``run_on_cluster`` replaced: each call recorded as (hosts, family, config); ``compute`` a step 10 ms more
    at each call (a cell measured twice would have another rate); ``fail``: configurations that fail;
    ``interrupt``: the call that is stopped with Ctrl-C."""
    calls = []

    def run(cluster, family, config, args):
        calls.append((cluster.nodes, family, config))
        if len(calls) == interrupt:
            raise KeyboardInterrupt
        if config in fail:
            raise bench.RunFailed("{} failed".format(config))
        computes = sum(1 for call in calls if call[2] == "compute")
        ms = 10.0 * computes if config == "compute" else 20.0
        return {"ms": [ms] * args.steps, "cpu_s": 0.01 * args.steps, "loss": 1.0,
                "node_bytes": {"10.77.0.1": [1e6 * args.steps, 1e6 * args.steps],
                               "10.77.0.2": [1e6 * args.steps, 1e6 * args.steps]},
                "peak_rss": {"10.77.0.1": 1e8}, "ready": {"startup_s": 1.0}}
    monkeypatch.setattr(bench, "run_on_cluster", run)
    return calls


@pytest.fixture
def table(bench, monkeypatch, tmp_path):
    """``main`` with the cluster and the runs faked, results and report in ``tmp_path``: ``(args) -> rc``."""
    import _results
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(bench, "BenchCluster", _Cluster)
    monkeypatch.setattr(bench, "wire_bytes", lambda model: 1e6)
    monkeypatch.setattr(_results, "RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr("autodist.runner.console.quiet_tensorflow_start", lambda: None)
    common = ["--results-dir", str(tmp_path), "--out", str(tmp_path), "--label", "t", "--families", "ncf"]
    _Cluster.made.clear()
    return lambda args: bench.main(common + args)


def _record(tmp_path):
    return json.loads((tmp_path / "t.json").read_text())["results"]


def test_a_resumed_table_runs_what_its_record_lacks_and_keeps_each_cells_compute_and_rate(bench, table, monkeypatch,
                                                                                        tmp_path, capsys):
    calls = _fake_runs(bench, monkeypatch, fail={"PS"})
    assert table(["--rounds", "1", "--hosts", "2", "--configs", "hand_ps", "PS"]) == 0
    assert calls == [(2, "ncf", "compute"), (2, "ncf", "hand_ps"), (2, "ncf", "PS")]
    rate = _record(tmp_path)["cells"][0]["rate"]
    out = capsys.readouterr().out
    assert "(2/2) [2 hosts, ncf, round 1/1] PS ... FAILED: PS failed (no run left)" in out
    assert (tmp_path / ("t" + TABLE)).exists() and (tmp_path / "t-ncf.png").exists()   # the report, from the record

    # the same label again without --resume would replace the record: refused
    assert table(["--rounds", "1", "--hosts", "2"]) == 2
    assert "t.json exists: --resume continues it" in capsys.readouterr().err

    # a second round, a configuration more and 4 hosts: the 2-host cell keeps its compute and rate, PS's failure
    # stands for round 1 and the 4-host cell measures its own compute (20 ms: another rate than 2 hosts' 10)
    _Cluster.made.clear()
    calls = _fake_runs(bench, monkeypatch)
    assert table(["--rounds", "2", "--resume", "--hosts", "2", "4", "--configs", "hand_ps", "PS", "Parallax"]) == 0
    assert calls == [(2, "ncf", "Parallax"), (2, "ncf", "Parallax"), (2, "ncf", "PS"), (2, "ncf", "hand_ps"),
                     (4, "ncf", "compute"), (4, "ncf", "hand_ps"), (4, "ncf", "PS"), (4, "ncf", "Parallax"),
                     (4, "ncf", "Parallax"), (4, "ncf", "PS"), (4, "ncf", "hand_ps")]   # round 2 backwards
    record = _record(tmp_path)
    cells = {c["hosts"]: c for c in record["cells"]}
    assert _Cluster.made[0].rates == [rate] and cells[2]["rate"] == rate and cells[4]["rate"] != rate
    assert {config: len(runs) for config, runs in cells[2]["runs"].items()} == {"hand_ps": 2, "PS": 1, "Parallax": 2}
    assert cells[2]["errors"] == {"PS": ["round 1: PS failed"]}
    assert [s["interrupted"] for s in record["sessions"]] == [False, False] and not record["interrupted"]
    out = capsys.readouterr().out
    assert "resuming {} (1 cells measured)".format(tmp_path / "t.json") in out
    assert "(10/10) [4 hosts, ncf, round 2/2] hand_ps" in out   # the last of the reversed round

    # nothing left: no cluster is made; then PS's failure run again on request
    _Cluster.made.clear()
    calls = _fake_runs(bench, monkeypatch)
    assert table(["--rounds", "2", "--resume", "--hosts", "2", "4", "--configs", "hand_ps"]) == 0
    assert calls == [] and _Cluster.made == []
    assert table(["--rounds", "2", "--resume", "--retry-failed", "--hosts", "2", "--configs", "PS"]) == 0
    assert calls == [(2, "ncf", "PS")]
    cell = {c["hosts"]: c for c in _record(tmp_path)["cells"]}[2]
    assert len(cell["runs"]["PS"]) == 2 and cell["errors"] == {} and cell["retried"] == {"PS": ["round 1: PS failed"]}
    assert table(["--resume", "--hosts", "2", "--steps", "7"]) == 2
    assert "measured under other settings: steps 7 (recorded 6)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        table(["--retry-failed"])
    assert "--retry-failed runs a record's failures again: it needs --resume" in capsys.readouterr().err
    assert table(["--smoke"]) == 2   # a smoke run replaces only its own record
    assert "t.json exists" in capsys.readouterr().err and len(_record(tmp_path)["cells"]) == 2
    assert table(["--rounds", "1", "--hosts", "2", "--configs", "hand_ps", "--overwrite"]) == 0
    record = _record(tmp_path)
    assert len(record["sessions"]) == 1 and list(record["cells"][0]["runs"]) == ["hand_ps"]


def test_a_table_stopped_by_ctrl_c_keeps_its_runs_and_resumes_at_the_stopped_one(bench, table, monkeypatch,
                                                                               tmp_path):
    calls = _fake_runs(bench, monkeypatch, interrupt=3)   # compute, hand_ps, then Ctrl-C in PS
    args = ["--rounds", "1", "--hosts", "2", "--configs", "hand_ps", "PS", "Parallax"]
    assert table(args) == 130 and _Cluster.made[0].removed
    record = _record(tmp_path)
    assert record["interrupted"] and record["sessions"][0]["interrupted"]
    assert list(record["cells"][0]["runs"]) == ["hand_ps"] and not record["cells"][0]["errors"]
    calls = _fake_runs(bench, monkeypatch)
    assert table(args + ["--resume"]) == 0
    assert calls == [(2, "ncf", "PS"), (2, "ncf", "Parallax")]
    assert [s["interrupted"] for s in _record(tmp_path)["sessions"]] == [True, False]


def test_a_sigterm_stops_the_table_as_ctrl_c_does_and_the_handlers_are_given_back(bench, table, monkeypatch,
                                                                                   tmp_path):
    import signal
    calls = _fake_runs(bench, monkeypatch)
    runs = bench.run_on_cluster

    def terminated(cluster, family, config, args):
        if config == "PS":
            # without the table's handler the signal would end pytest itself: fail instead
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
            os.kill(os.getpid(), signal.SIGTERM)
        return runs(cluster, family, config, args)
    monkeypatch.setattr(bench, "run_on_cluster", terminated)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert table(["--rounds", "1", "--hosts", "2", "--configs", "hand_ps", "PS", "Parallax"]) == 143
    assert calls == [(2, "ncf", "compute"), (2, "ncf", "hand_ps")] and _Cluster.made[0].removed
    assert _record(tmp_path)["interrupted"] and list(_record(tmp_path)["cells"][0]["runs"]) == ["hand_ps"]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_cell_whose_compute_fails_is_listed_and_the_table_goes_on(bench, table, monkeypatch, tmp_path, capsys):
    calls = _fake_runs(bench, monkeypatch, fail={"compute"})
    assert table(["--rounds", "1", "--hosts", "2", "4", "--configs", "hand_ps"]) == 0
    assert calls == [(2, "ncf", "compute"), (4, "ncf", "compute")]
    record = _record(tmp_path)
    assert record["cells"] == [] and [(f["family"], f["hosts"]) for f in record["failed"]] == [("ncf", 2), ("ncf", 4)]
    assert "FAILED: ncf on 2 hosts: its compute run failed: compute failed" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.cluster
def test_smoke_run_makes_the_table_and_removes_its_cluster(tmp_path, monkeypatch):
    """A sparse family, an anchor and AutoStrategy on 2 hosts, end to end: ``--smoke`` less one family and one
    builder (every family is built above; a builder runs as AutoStrategy's plan does)."""
    import tiers
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multihost"))
    from clustertools import cannot_make_reason
    reason = cannot_make_reason()
    if reason:
        tiers.unavailable("cluster", reason)
    configs = ["mwms_25mib", "AutoStrategy"]
    argv = [sys.executable, SCRIPT, "--hosts", "2", "--families", "ncf", "--rounds", "1", "--steps", "3",
            "--warmup", "2", "--timeout", "400", "--results-dir", str(tmp_path), "--out", str(tmp_path),
            "--label", "smoke", "--configs"]
    # the anchor first; the same command resumed with AutoStrategy added runs only AutoStrategy, on a new cluster
    first = subprocess.run(argv + configs[:1], capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    anchor = json.loads((tmp_path / "smoke.json").read_text())["results"]["cells"][0]
    done = subprocess.run(argv + configs + ["--resume"], capture_output=True, text=True, timeout=1800)
    names = set(re.findall(r"cluster '(bench\d+)'", first.stdout + done.stdout))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming" in done.stdout and "1 run to go" in done.stdout and "ncf on 2 hosts, resumed" in done.stdout
    record = json.loads((tmp_path / "smoke.json").read_text())["results"]
    kept = record["cells"][0]
    assert (kept["compute_ms"], kept["rate"], kept["runs"]["mwms_25mib"]) == (
        anchor["compute_ms"], anchor["rate"], anchor["runs"]["mwms_25mib"])
    cells = {(c["family"], c["hosts"]): c for c in record["cells"]}
    assert set(cells) == {("ncf", 2)}
    for cell in cells.values():
        assert cell["compute_ms"] > 0 and cell["rate"] > 0 and not cell["errors"], cell["errors"]
        assert sorted(cell["runs"]) == sorted(configs)
        auto = cell["runs"]["AutoStrategy"][0]
        assert auto["ready"]["chosen"] and auto["ready"]["plan_s"] > 0 and auto["ready"]["transform_s"] > 0
        priced = {c["name"]: c["arguments"] for c in auto["ready"]["auto"]["candidates"]}
        assert priced["AllReduce"]["bucket_bytes"] > 0, "the record names the bucket size AllReduce was priced at"
        assert all(len(run["node_bytes"]) == 2 and all(run["peak_rss"].values()) for runs in cell["runs"].values()
                   for run in runs)
    assert {p.name for p in tmp_path.iterdir()} >= {"smoke" + TABLE, "smoke-ncf.png"}
    assert "goals (issue 40)" in done.stdout and "Traceback" not in done.stdout
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    assert len(names) == 2 and not any("autodist-{}-".format(name) in left for name in names), left


def test_the_model_check_prices_every_builder_of_a_cell_with_the_calibration_its_run_recorded(monkeypatch, tmp_path,
                                                                                             capsys):
    """``paper_table_model.py``: each cell's builders priced with the recorded calibration, next to what they
    measured, and AutoStrategy's pick with its regret; a cell without a calibration is skipped, saying how."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    import _results
    import paper_table_model
    from autodist.strategies.cost.calibration import Calibration
    monkeypatch.setattr(_results, "RESULTS_DIR", str(tmp_path))
    calibration = Calibration(rpc_latency_s=1e-4, rpc_bandwidth=1e8, rpc_duplex=1.0, collective_latency_s=1e-4,
                              collective_bandwidth=1e8, local_bandwidth=1e10, update_bytes_per_s=1e10,
                              sparse_update_bytes_per_s=1e9, fixed_step_s=1e-4, round_trip_s=1e-3, ps_step_s=2e-3,
                              overlap=0.0, flops=1e11, source="probe")
    measured = {name: 10.0 + i for i, name in enumerate(paper_table_model.BUILDERS)}
    recorded = _cell("ncf", 2)
    recorded["runs"] = {name: [_run([ms], 1e5)] for name, ms in measured.items()}
    recorded["runs"]["AutoStrategy"] = [_run([12.0], 1e5, chosen="PS", calibration=calibration.to_dict())]
    bare = dict(_cell("ncf", 4), runs={"PS": [_run([5.0], 1e5)]})
    results = tmp_path / "table.json"
    results.write_text(json.dumps({"results": {"cells": [recorded, bare]}}))
    assert paper_table_model.main([str(results), "--label", "model"]) == 0
    out = capsys.readouterr().out
    assert "ncf on 4 hosts: skipped, no calibration (pass --calibration ncf:4=PATH)" in out
    cells = json.loads((tmp_path / "model.json").read_text())["results"]["cells"]
    assert [(c["family"], c["hosts"], c["calibration"]) for c in cells] == [("ncf", 2, "recorded")]
    for compute in ("estimated", "measured"):
        priced = cells[0]["priced"][compute]
        assert {name: pair[0] for name, pair in priced["builders"].items()} == measured
        assert all(pair[1] > 0 for pair in priced["builders"].values())
        if priced["pick"] in measured and priced["pick"] != "AllReduce":
            assert priced["regret"] == pytest.approx(measured[priced["pick"]] / 10.0)
        else:   # searched, or AutoStrategy's fused AllReduce: measured only as the cell's AutoStrategy run (12 ms)
            assert priced["regret"] in (None, pytest.approx(1.2))
    assert cells[0]["priced"]["measured"]["compute_ms"] == 100.0   # the cell's shared compute
    with pytest.raises(SystemExit, match="FAMILY:HOSTS=PATH"):
        paper_table_model.parse_calibrations(["ncf=4"])


def test_startup_rows_name_the_plan_autostrategy_chose(monkeypatch):
    """``startup_time.py``: ratios to MirroredStrategy of the same round, and AutoStrategy's pick per round."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    startup = importlib.import_module("startup_time")
    rounds = [{"mirrored": {"first_step_s": 20.0, "step_ms": 400.0},
               "AutoStrategy": {"first_step_s": 15.0, "step_ms": 200.0, "chosen": "PSLoadBalancing"}},
              {"mirrored": {"first_step_s": 30.0, "step_ms": 600.0},
               "AutoStrategy": {"first_step_s": 30.0, "step_ms": 360.0, "chosen": "AllReduce"}},
              {"mirrored": {"error": "exit 1"}, "AutoStrategy": {"error": "exit 1"}}]
    rows = {row["config"]: row for row in startup.summary(rounds, ["mirrored", "AutoStrategy"])}
    auto = rows["AutoStrategy"]
    assert auto["runs"] == 2 and auto["errors"] == ["exit 1"]
    assert auto["start_vs_mirrored"] == pytest.approx((0.75 + 1.0) / 2)
    assert auto["step_vs_mirrored"] == pytest.approx((0.5 + 0.6) / 2)
    assert auto["chosen"] == ["AllReduce", "PSLoadBalancing"] and "chosen" not in rows["mirrored"]


def test_the_model_checks_regret_counts_allreduces_bucket_runs_as_builders(monkeypatch):
    """``paper_table_model.best_builder_ms``: every builder and ``AllReduce_<n>mib`` run, not the anchors or
    AutoStrategy."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    model = importlib.import_module("paper_table_model")
    ms = {"mwms_25mib": 90.0, "hand_ps": 95.0, "AutoStrategy": 80.0, "PS": 130.0, "AllReduce": 120.0,
          "AllReduce_25mib": 110.0, "AllReduce_x": 10.0}
    assert model.best_builder_ms(ms) == 110.0
    assert model.best_builder_ms({"mwms_25mib": 90.0}) is None
