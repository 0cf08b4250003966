"""benchmarks/step_time.py keeps working: its pure parts, and a --quick run at the tiny size (no timing asserted)."""
import importlib
import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
SCRIPT = os.path.join(BENCHMARKS, "step_time.py")


@pytest.fixture
def bench(monkeypatch):
    """The harness module; its helper modules (``step_time_*``) import from benchmarks/ too."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    return importlib.import_module("step_time")


def test_models_have_the_issue_sizes(bench):
    from step_time_models import MODELS, param_count
    counts = {name: param_count(model) for name, model in MODELS.items()}
    assert counts == {"mlp": 25196554, "cnn": 488586, "emb": 64004225, "tiny": 11}
    assert {name: model.batch for name, model in MODELS.items()} == {"mlp": 32, "cnn": 32, "emb": 256, "tiny": 8}


def test_ss_output_is_parsed_per_socket(bench):
    from step_time_procs import parse_ss
    out = ("ESTAB 0 0 127.0.0.1:4000 127.0.0.2:5000 users:((\"python\",pid=10,fd=5),(\"python\",pid=11,fd=5))\n"
           "\t cubic wscale:7,7 bytes_sent:1234 bytes_acked:1235 bytes_received:99 segs_out:3\n"
           "ESTAB 0 0 [::ffff:127.0.0.2]:5000 [::ffff:127.0.0.1]:4000 users:((\"python\",pid=20,fd=7))\n"
           "\t cubic bytes_received:1234\n")
    assert parse_ss(out) == {("127.0.0.1:4000", "127.0.0.2:5000"): ([10, 11], 1234),
                             ("127.0.0.2:5000", "127.0.0.1:4000"): ([20], 0)}


def test_traffic_counts_the_jobs_sockets_and_what_crosses_nodes(bench):
    from step_time_procs import traffic
    a, b, c = "127.0.0.1:1", "127.0.0.2:2", "127.0.0.2:3"
    before = {(a, b): ([10], 100), (b, a): ([20], 50), (b, c): ([20], 0), (c, b): ([21], 0)}
    after = {(a, b): ([10], 400), (b, a): ([20], 60), (b, c): ([20], 7), (c, b): ([21], 3),
             ("127.0.0.1:9", "127.0.0.1:8"): ([99], 1000),      # another user's process
             (a, "127.0.0.2:4"): ([10], 5)}                     # opened during the window, peer unknown
    total, cross = traffic(before, after, {10: 0, 20: 1, 21: 1})
    assert total == 300 + 10 + 7 + 3 + 5
    assert cross == 300 + 10


def test_rows_summarize_rounds_and_ratio_to_the_best_baseline(bench):
    run = {"ms": [1.0, 2.0, 3.0, 4.0], "cpu_s": 0.4, "sent": 800, "cross_node": 400}
    rows = bench.add_ratios([
        bench.summarize("tiny", "hand_ps", [run], [], 2),
        bench.summarize("tiny", "mwms", [dict(run, ms=[1.0, 1.0])], [], 2),
        bench.summarize("tiny", "single", [dict(run, ms=[0.5])], [], 2),
        bench.summarize("tiny", "PS", [run, run], ["round 2: worker1 exited with 1 after the timed steps"], 2),
        bench.summarize("tiny", "AllReduce", [], ["round 1: no 'ready'"], 1)])
    by = {row["config"]: row for row in rows}
    assert by["PS"]["median_ms"] == 2.5 and by["PS"]["steps"] == 8 and by["PS"]["rounds"] == 2
    assert by["PS"]["cpu_s_per_step"] == pytest.approx(0.1)
    assert by["PS"]["bytes_per_step"] == 100 and by["PS"]["cross_node_bytes_per_step"] == 50
    assert by["single"]["bytes_per_step"] == 800 / 1      # one process: all bytes are its own
    assert by["PS"]["ratio"] == 2.5 and by["mwms"]["ratio"] == 1.0 and by["single"]["ratio"] == 0.5
    assert by["AllReduce"]["median_ms"] is None and by["AllReduce"]["ratio"] is None


def test_thread_cpu_is_summed_per_kind_of_thread_and_grows_with_work(bench):
    """``thread_cpu_seconds``: a thread's name less its trailing number is its kind (a pool's threads add up); the
    cluster harness subtracts two readings thread by thread (``cluster_step_time_run._by_thread_kind``), so a
    thread that ended in between takes nothing away from the threads of its kind still running."""
    import threading
    import time
    from step_time_procs import thread_cpu_seconds, thread_kind
    from cluster_step_time_run import _by_thread_kind
    assert [thread_kind(n) for n in ("tf_Compute", "python3", "worker-12", "pool_3", "x#7", "17")] == \
        ["tf_Compute", "python", "worker", "pool", "x", "?"]

    def spin(seconds):   # bounded: this much of the calling thread's own CPU
        started = time.thread_time()
        while time.thread_time() - started < seconds:
            sum(range(1000))

    pid = os.getpid()
    me = threading.get_native_id()
    ends, ended = threading.Event(), []
    short = threading.Thread(target=lambda: (ended.append(threading.get_native_id()), spin(0.2), ends.wait(60)),
                             daemon=True)
    short.start()
    deadline = time.monotonic() + 60
    while not ended and time.monotonic() < deadline:   # its first act is to say who it is
        time.sleep(0.01)
    before = thread_cpu_seconds(pid)
    assert before[ended[0]][1] >= 0.0 and before[me][0] == before[ended[0]][0]   # one kind: both are Python's
    ends.set()
    short.join(60)
    spin(0.3)
    after = thread_cpu_seconds(pid)
    kind = after[me][0]
    # 0.25: the kernel counts CPU in clock ticks (10 ms), the spin measures it to the nanosecond
    assert ended[0] not in after and after[me][1] - before[me][1] >= 0.25
    grown = _by_thread_kind([pid], {pid: before})
    assert grown[kind] >= 0.25, "the ended thread's earlier CPU is not subtracted from its kind"
    assert list(grown) == sorted(grown, key=lambda k: -grown[k])   # largest first
    assert thread_cpu_seconds(2 ** 22 + 1) == {}   # no such process (above the largest pid_max Linux allows)


def test_hand_ps_starts_the_server_first_and_worker_0_last(bench):
    from step_time_run import launches
    plan = launches("hand_ps")
    assert [(p.name, p.node, p.reporter) for p in plan] == [("ps", 0, False), ("worker1", 1, False),
                                                            ("worker0", 0, True)]
    cluster = json.loads(plan[0].role[plan[0].role.index("--cluster") + 1])
    addresses = cluster["ps"] + cluster["worker"]
    assert [a.split(":")[0] for a in addresses] == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
    assert len({a.split(":")[1] for a in addresses}) == 3
    chief, = launches("Parallax")
    assert (chief.node, chief.children_node, chief.reporter) == (0, 1, True)


def test_compressed_configurations_pass_the_compressor_and_rows_carry_the_loss(bench):
    from step_time_run import launches
    chief, = launches("AllReduce_powersgd")
    role = chief.role
    assert role[:3] == ["autodist", "--builder", "AllReduce"]
    assert json.loads(role[role.index("--builder-args") + 1]) == {"compressor": "PowerSGDCompressor"}
    plain, = launches("AllReduce")
    assert json.loads(plain.role[plain.role.index("--builder-args") + 1]) == {}
    run = {"ms": [1.0], "cpu_s": 0.1, "sent": 8, "cross_node": 4}
    row = bench.summarize("mlp", "AllReduce_fp16", [dict(run, loss=0.5), dict(run, loss=0.25), dict(run, loss=1.0)],
                          [], 3)
    assert row["loss"] == 0.5, "the median over the rounds"
    assert bench.summarize("mlp", "hand_ps", [run], [], 1)["loss"] is None, "baselines report none"


def test_the_cluster_benchmark_takes_the_bucket_layouts_only_when_named(bench):
    """``cluster_step_time --configs AllReduce_128mib ...`` (one ring against several, docs/performance.md phase 11)
    runs AllReduce with buckets closed by bytes alone; the default configurations leave them out."""
    import cluster_step_time
    from step_time_run import launches
    args = cluster_step_time._parser().parse_args(["--configs", "AllReduce_128mib", "AllReduce_16mib"])
    assert args.configs == ["AllReduce_128mib", "AllReduce_16mib"]
    assert not any(c.startswith("AllReduce_") and c.endswith("mib") for c in cluster_step_time._parser().parse_args(
        []).configs)
    chief, = launches("AllReduce_128mib")
    assert json.loads(chief.role[chief.role.index("--builder-args") + 1]) == {"chunk_size": 2 ** 31,
                                                                              "bucket_bytes": 128 << 20}


def test_the_cluster_benchmark_runs_even_rounds_backwards(bench, monkeypatch, tmp_path):
    """``cluster_step_time.run_rate`` orders its rounds as ``paper_table`` does (``round_order``): with one order
    the last configuration always paid its place in the round (docs/performance.md, phase 12)."""
    import cluster_step_time

    class Cluster:
        rate = 1e9

        def __init__(self, rate, args, directory):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def calibrate(self):
            return {}

    order = []

    def run(cluster, model, config, args):
        order.append(config)
        return {"ms": [1.0], "node_bytes": {"n0": [1, 1]}, "cpu_s": 0.001}

    monkeypatch.setattr(cluster_step_time, "BenchCluster", Cluster)
    monkeypatch.setattr(cluster_step_time, "run_on_cluster", run)
    args = cluster_step_time._parser().parse_args(["--configs", "hand_ps", "AllReduce", "--rounds", "2"])
    cluster_step_time.run_rate("1gbit", args, str(tmp_path))
    first = [cluster_step_time.COMPUTE, "hand_ps", "AllReduce"]
    assert order == first + first[::-1]


@pytest.mark.slow
def test_session_cpu_times_every_way_of_running_a_step(tmp_path):
    """``benchmarks/session_cpu.py`` at the tiny size: a row of CPU per step for every way (no timing asserted)."""
    script = os.path.join(BENCHMARKS, "session_cpu.py")
    argv = [sys.executable, script, "--family", "tiny", "--steps", "3", "--warmup", "1",
            "--results-dir", str(tmp_path), "--label", "smoke"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "smoke.json").read_text())["results"]["rows"]
    sys.path.insert(0, BENCHMARKS)
    try:
        from session_cpu import WAYS
    finally:
        sys.path.remove(BENCHMARKS)
    assert [row["way"] for row in rows] == list(WAYS)
    assert all(row["median_cpu_ms"] > 0 for row in rows)
    assert [row for row in rows if row["way"] == "tf1 master"][0]["vs_master"] == 1.0
    refused = subprocess.run([sys.executable, script, "--steps", "0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "0 is below 1" in refused.stderr   # argparse's usage error, no traceback


@pytest.mark.slow
def test_quick_run_writes_a_row_with_numbers_for_every_configuration(bench, tmp_path):
    argv = [sys.executable, SCRIPT, "--quick", "--steps", "3", "--warmup", "1", "--timeout", "150",
            "--results-dir", str(tmp_path), "--label", "smoke"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "smoke.json").read_text())["results"]
    rows = data["rows"]
    assert [(row["model"], row["config"]) for row in rows] == [("tiny", c) for c in bench.QUICK["configs"]]
    for row in rows:
        assert row["errors"] == [], row
        assert row["steps"] == 3 and row["rounds"] == 1
        for key in ("median_ms", "p90_ms", "bytes_per_step", "cross_node_bytes_per_step", "cpu_s_per_step",
                    "ratio"):
            assert isinstance(row[key], (int, float)), (key, row)
    assert {"cores", "load_start", "load_end", "versions"} <= set(data["machine"])
    assert "tensorflow" in data["machine"]["versions"]
    assert "I0000" not in done.stdout and "Traceback" not in done.stdout
    assert "[round 1/1, run 5/5] tiny AllReduce" in done.stdout
