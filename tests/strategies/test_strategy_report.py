"""The plan report: traffic formulas, per-device totals, λ, table and JSON."""
import json
import re

import pytest

from autodist.strategies import AllReduce, PS, PSLoadBalancing, PartitionedPS, Strategy
from autodist.strategies.report import (format_table, human_bytes, load_imbalance, plan_report,
                                        ps_push_pull_bytes, ring_all_reduce_bytes)


def test_formulas():
    assert ring_all_reduce_bytes(1000, 4) == 1500.0        # 2 (N-1)/N M
    assert ring_all_reduce_bytes(1000, 1) == 0.0
    assert ps_push_pull_bytes(1000, 4) == (1000, 1000, 4000, 4000)
    assert load_imbalance({"a": 30, "b": 10}) == 1.5
    assert load_imbalance([0, 0]) == 1.0


def devices(report):
    return {d.device: (d.roles, d.held_bytes, d.sent_bytes, d.received_bytes)
            for d in report.devices}


def test_ps_totals(make_var, two_gpus):
    variables = [make_var("w", (100,)), make_var("emb", (50, 2), sparse=True)]   # 400 + 400 bytes
    report = plan_report(PS().build_from_variables(variables, two_gpus), variables, two_gpus)
    assert devices(report) == {
        "127.0.0.1:CPU:0": (("server",), 800, 1600, 1600),      # 2 replicas pull / push 800
        "127.0.0.1:GPU:0": (("replica",), 0, 800, 800),
        "127.0.0.1:GPU:1": (("replica",), 0, 800, 800),
    }
    assert report.imbalance == 1.0 and report.num_servers == 1
    assert [(v.name, v.synchronizer, v.placement, v.sparse) for v in report.variables] == [
        ("w:0", "PS", ("127.0.0.1:CPU:0",), False), ("emb:0", "PS", ("127.0.0.1:CPU:0",), True)]


def test_all_reduce_totals(make_var, four_servers):
    variables = [make_var("w", (250,)), make_var("b", (1,))]              # 1000 + 4 bytes
    report = plan_report(AllReduce().build_from_variables(variables, four_servers), variables, four_servers)
    ring = round(ring_all_reduce_bytes(1004, 4))
    assert set(devices(report).values()) == {(("replica",), 1004, ring, ring)}
    assert len(report.devices) == 4 and report.imbalance == 1.0 and report.num_servers == 0


def test_half_gradients_move_half_the_bytes(make_var, two_gpus, four_servers):
    """Under mixed precision a float16 gradient is pushed (or all-reduced) at 2 bytes an element; the new
    float32 value is pulled whole and held whole."""
    import dataclasses
    variables = [dataclasses.replace(make_var("w", (100,)), grad_dtype="float16")]   # 400 bytes, gradient 200
    report = plan_report(PS().build_from_variables(variables, two_gpus), variables, two_gpus)
    assert devices(report) == {
        "127.0.0.1:CPU:0": (("server",), 400, 800, 400),        # sends 2 x 400, receives 2 x 200
        "127.0.0.1:GPU:0": (("replica",), 0, 200, 400),
        "127.0.0.1:GPU:1": (("replica",), 0, 200, 400),
    }
    report = plan_report(AllReduce().build_from_variables(variables, four_servers), variables, four_servers)
    ring = round(ring_all_reduce_bytes(200, 4))
    assert set(devices(report).values()) == {(("replica",), 400, ring, ring)}


def test_proxies_are_held_by_other_nodes_and_single_server_lambda(make_var, make_spec):
    spec = make_spec([("127.0.0.1", (), (0,)), ("127.0.0.2", (), (0,))])
    variables = [make_var("w", (100,))]
    report = plan_report(PS(local_proxy_variable=True).build_from_variables(variables, spec), variables, spec)
    assert devices(report)["127.0.0.2:CPU:0"] == (("replica",), 400, 400, 400)
    # the server's own node reads w where it is: no copy there
    assert devices(report)["127.0.0.1:CPU:0"] == (("replica", "server"), 400, 1200, 1200)
    assert report.imbalance == 2.0, "one of two candidate servers holds everything"


def test_partitioned_rows(make_var, four_servers):
    variables = [make_var("emb", (4099, 256), sparse=True)]
    strategy = PartitionedPS().build_from_variables(variables, four_servers)
    row = plan_report(strategy, variables, four_servers).variables[0]
    assert row.partitioner == "4,1" and row.shard_sizes == (1025, 1025, 1025, 1024)
    assert [s.bytes for s in row.shards] == [1025 * 1024] * 3 + [1024 * 1024]
    assert [s.name for s in row.shards] == ["emb/part_{}:0".format(i) for i in range(4)]
    assert row.placement == tuple("10.0.0.{}:CPU:0".format(i) for i in range(1, 5))


def test_variables_the_strategy_leaves_alone_are_listed(make_var, one_cpu):
    variables = [make_var("w", (4,)), make_var("lost", (4,))]
    strategy = PS().build_from_variables(variables[:1], one_cpu)
    rows = plan_report(strategy, variables, one_cpu).variables
    assert [(r.name, r.synchronizer) for r in rows] == [("w:0", "PS"), ("lost:0", "none")]


def test_table(make_var, four_servers):
    variables = [make_var("emb", (4099, 256), sparse=True), make_var("dense/kernel", (784, 10))]
    builder = PartitionedPS()
    report = plan_report(builder.build_from_variables(variables, four_servers), variables, four_servers,
                         repr(builder))
    text = format_table(report)
    lines = text.splitlines()
    assert lines[0].startswith("strategy {}  built by PartitionedPS(".format(report.strategy_id))
    assert lines[3].split() == ["variable", "shape", "dtype", "bytes", "kind", "synchronizer",
                                "server/group", "partitions", "compressor"]
    assert lines[4].split()[:7] == ["emb:0", "[4099,", "256]", "float32", "4.0", "MiB", "sparse"]
    assert lines[4].endswith("4,1 (1025/1025/1025/1024)  -")
    assert lines[5].split()[:2] == ["dense/kernel:0", "[784,"]
    assert lines[-1].startswith("2 variables, 4.0 MiB; imbalance λ = ")
    assert "over 4 candidate servers" in lines[-1]


def test_table_for_all_reduce(make_var, one_cpu):
    variables = [make_var("w", (None, 3)), make_var("s", ())]
    report = plan_report(AllReduce(chunk_size=1).build_from_variables(variables, one_cpu), variables, one_cpu)
    text = format_table(report)
    assert re.search(r"^w:0 +\[\?, 3\] +float32 +12 B +dense +AllReduce +group 0 ", text, re.M)
    assert re.search(r"^s:0 +\[\] +float32 +4 B +dense +AllReduce +group 1 ", text, re.M)
    assert text.endswith("no parameter servers: every replica holds the same bytes)")


def test_json_has_the_documented_fields(make_var, four_servers):
    variables = [make_var("emb", (4099, 256), sparse=True), make_var("w", (3,))]
    data = plan_report(PSLoadBalancing().build_from_variables(variables, four_servers), variables,
                       four_servers).to_dict()
    data = json.loads(json.dumps(data))
    assert {"variables", "devices", "imbalance", "replicas", "strategy_id"} <= set(data)
    emb = data["variables"][0]
    assert {k: emb[k] for k in ("name", "shape", "dtype", "bytes", "synchronizer", "sparse")} == {
        "name": "emb:0", "shape": [4099, 256], "dtype": "float32", "bytes": 4099 * 1024,
        "synchronizer": "PS", "sparse": True}
    assert {"device", "held_bytes", "sent_bytes", "received_bytes", "roles"} <= \
        set(data["devices"][0])
    assert data["imbalance"] == pytest.approx(4.0, rel=1e-3)


def test_unknown_entries_do_not_break_the_report(one_cpu):
    strategy = Strategy()
    node = strategy.node_config.add(var_name="ghost:0", partitioner="2,1")
    node.AllReduceSynchronizer.SetInParent()
    report = plan_report(strategy, [], one_cpu)
    assert report.variables[0].shape is None and report.variables[0].bytes == 0
    assert "ghost:0" in format_table(report)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"),
                                     (5 << 20, "5.0 MiB"), (3 << 30, "3.0 GiB"),
                                     (2 << 40, "2.0 TiB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_synchronized_batch_norm_moves_like_an_all_reduce_or_through_the_chief(make_var, make_spec):
    from autodist.strategies.inputs import BatchStatistics
    spec = make_spec([("127.0.0.1", (), (0,)), ("127.0.0.2", (), (0,))])
    variables = [make_var("w", (250,))]                           # 1000 bytes
    statistics = BatchStatistics(exchanges=6, bytes=300)
    report = plan_report(AllReduce().build_from_variables(variables, spec), variables, spec, statistics=statistics)
    ring = round(ring_all_reduce_bytes(1300, 2))
    assert set(devices(report).values()) == {(("replica",), 1000, ring, ring)}
    assert report.statistics == {"exchanges": 6, "bytes": 300, "relayed": False}
    assert "synchronized batch norm: 6 exchanges per step (forward and backward), 300 B per replica, all-reduced" \
        in format_table(report)
    report = plan_report(PS().build_from_variables(variables, spec), variables, spec, statistics=statistics)
    assert devices(report)["127.0.0.2:CPU:0"] == (("replica",), 0, 1300, 1300)   # push and pull, relayed 300
    assert report.to_dict()["synchronized_batch_norm"]["relayed"]
    assert plan_report(PS().build_from_variables(variables, spec), variables, spec).statistics is None
