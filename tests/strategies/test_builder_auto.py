"""AutoStrategy: deterministic, the best preset or a searched plan by the margin, an ordinary Strategy; plan's "auto"."""
import dataclasses
import json
import pathlib
import sys

import pytest

from autodist import cli
from autodist.plan.contract import read_entries
from autodist.strategies import AutoStrategy
from autodist.strategies.auto import BUCKET_CHOICES, SEARCHED, search_margin
from autodist.strategies.cost import Calibration, Compute, predict
from autodist.strategies.report import exact_bytes

from strategy_inputs_for_tests import _spec_from, _var

TWO_NODES = str(pathlib.Path(__file__).resolve().parents[2] / "resource_specs" / "loopback_two_nodes.yml")
PRESETS = ["PS", "PSLoadBalancing", "PartitionedPS", "AllReduce", "Parallax"]


def _calibration(**changes):
    values = dict(rpc_latency_s=50e-6, rpc_bandwidth=1.2e9, rpc_duplex=1.0, collective_latency_s=100e-6,
                  collective_bandwidth=0.4e9,
                  local_bandwidth=20e9, update_bytes_per_s=10e9, sparse_update_bytes_per_s=1e9, fixed_step_s=2e-3,
                  round_trip_s=1e-3, ps_step_s=3e-3, overlap=0.0,
                  flops=1e11,
                  source="probe")
    values.update(changes)
    return Calibration(**values)


@pytest.fixture
def nodes():
    return _spec_from([("10.0.0.1", (), (0,)), ("10.0.0.2", (), (0,))])


def _rule_holds(result):
    """The chosen plan is the cheapest preset, or the searched plan when at least the margin cheaper still."""
    predictions = dict(result.candidates)
    best_preset = min(predictions[name].step_s for name in PRESETS)
    margin = search_margin(predictions[SEARCHED])
    if result.chosen == SEARCHED:
        return predictions[SEARCHED].step_s <= (1 - margin) * best_preset + 1e-12
    return (result.prediction.step_s == best_preset
            and predictions[SEARCHED].step_s > (1 - margin) * best_preset - 1e-12)


def _mlp():
    return [_var("w{}".format(i), [2048, 2048]) for i in range(5)] + [_var("b{}".format(i), [2048]) for i in range(5)]


def test_candidates_and_the_json_shape(nodes):
    result = AutoStrategy(calibration=_calibration()).search_variables(_mlp(), nodes, Compute(0.03))
    data = result.to_dict()
    assert [c["name"] for c in data["candidates"]] == PRESETS + [SEARCHED]
    assert data["chosen"] in PRESETS + [SEARCHED]
    assert _rule_holds(result)
    assert data["predicted_step_ms"] == dict((c["name"], c["predicted_step_ms"]) for c in data["candidates"])[
        data["chosen"]]
    assert all(set(c) == {"name", "predicted_step_ms", "comm_share", "relayed", "arguments"}
               for c in data["candidates"])
    arguments = {c["name"]: c["arguments"] for c in data["candidates"]}
    assert arguments[SEARCHED] is None and arguments["PS"] == {"local_proxy_variable": False, "sync": True,
                                                                "staleness": 0}
    assert arguments["AllReduce"]["bucket_bytes"] in BUCKET_CHOICES
    assert json.loads(json.dumps(data)) == data


def test_deterministic_and_insensitive_to_probe_noise(nodes):
    first = AutoStrategy(calibration=_calibration()).search_variables(_mlp(), nodes, Compute(0.03))
    again = AutoStrategy(calibration=_calibration()).search_variables(_mlp(), nodes, Compute(0.03))
    noisy = AutoStrategy(calibration=_calibration(rpc_bandwidth=1.2001e9, fixed_step_s=2.0004e-3)).search_variables(
        _mlp(), nodes, Compute(0.03))
    assert first.strategy.id == again.strategy.id == noisy.strategy.id
    assert first.strategy.proto.SerializeToString(deterministic=True) == \
        again.strategy.proto.SerializeToString(deterministic=True)


def test_never_predicted_worse_than_a_preset_and_an_ordinary_strategy(nodes):
    variables = _mlp() + [_var("emb", [100000, 64], sparse=True)]
    calibration = _calibration()
    compute = Compute(0.03, sparse_rows={"emb:0": 4096})
    result = AutoStrategy(calibration=calibration).search_variables(variables, nodes, compute)
    predictions = dict(result.candidates)
    assert predictions[SEARCHED].step_s <= predictions["PSLoadBalancing"].step_s + 1e-12
    assert _rule_holds(result)
    assert result.prediction.step_s <= min(predictions[name].step_s for name in PRESETS)
    entries = read_entries(result.strategy)
    assert set(entries.variables) == {v.op_name for v in variables}
    assert entries.replicas == ("10.0.0.1:CPU:0", "10.0.0.2:CPU:0")
    assert predict(result.strategy, variables, compute, calibration.rounded()) == result.prediction


def test_the_cheaper_transport_wins(nodes):
    fast_ring = _calibration(collective_bandwidth=10e9, collective_latency_s=1e-6, rpc_bandwidth=0.1e9)
    result = AutoStrategy(calibration=fast_ring).search_variables(_mlp(), nodes, Compute(0.03))
    assert {e.synchronizer.kind for e in read_entries(result.strategy).variables.values()} == {"ar"}
    slow_ring = _calibration(collective_bandwidth=0.05e9)
    result = AutoStrategy(calibration=slow_ring).search_variables(_mlp(), nodes, Compute(0.03))
    kinds = [p.synchronizer.kind for p in read_entries(result.strategy).synchronized.values()]
    assert set(kinds) == {"ps"}


def test_the_search_splits_a_variable_that_unbalances_the_servers(nodes):
    variables = [_var("big", [4096, 1024]), _var("small", [16])]
    result = AutoStrategy(calibration=_calibration(collective_bandwidth=0.01e9)).search_variables(
        variables, nodes, Compute(0.01))
    searched = dict(result.candidates)[SEARCHED]
    plain = dict(result.candidates)["PSLoadBalancing"]
    assert searched.step_s < plain.step_s
    assert read_entries(result.strategy).variables["big"].partition is not None


def test_the_searched_plan_must_beat_every_preset_by_the_margin(nodes, monkeypatch):
    from autodist.strategies import auto
    # a big variable best split over the servers (the ring is slow), 100 small ones best all-gathered
    # in one bucket (a message each on a server): no preset does both
    variables = [_var("big", [4096, 1024])] + [_var("s{}".format(i), [16]) for i in range(100)]
    search = AutoStrategy(calibration=_calibration(collective_bandwidth=0.01e9))
    result = search.search_variables(variables, nodes, Compute(0.01))
    predictions = dict(result.candidates)
    best_preset = min(predictions[name].step_s for name in PRESETS)
    gain = 1.0 - predictions[SEARCHED].step_s / best_preset
    # servers and all-reduce over two nodes: the kernel relays the all-reduce, so the relay's margin decides
    assert predictions[SEARCHED].relayed and search_margin(predictions[SEARCHED]) == auto.RELAY_MARGIN
    assert auto.SEARCH_MARGIN < gain < auto.RELAY_MARGIN   # enough for a plan that does not relay; not for this one
    assert result.chosen in PRESETS and _rule_holds(result)
    monkeypatch.setattr(auto, "RELAY_MARGIN", gain - 0.01)   # a margin the gain clears
    assert search.search_variables(variables, nodes, Compute(0.01)).chosen == SEARCHED
    monkeypatch.setattr(auto, "RELAY_MARGIN", gain + 0.01)   # the same gain, no longer enough
    result = search.search_variables(variables, nodes, Compute(0.01))
    assert result.chosen in PRESETS and result.prediction.step_s == best_preset
    monkeypatch.setattr(auto, "SEARCH_MARGIN", 1.0)   # the plain margin is not the one that applies here
    monkeypatch.setattr(auto, "RELAY_MARGIN", gain - 0.01)
    assert search.search_variables(variables, nodes, Compute(0.01)).chosen == SEARCHED


def test_a_searched_plan_that_does_not_relay_keeps_the_plain_margin(monkeypatch):
    from autodist.strategies import auto
    from autodist.strategies.cost import Prediction
    plain, relaying = (Prediction(step_s=1.0, compute_s=0.5, comm_s=0.5, exposed_comm_s=0.5, fixed_s=0.0,
                                  bottleneck="10.0.0.1", relayed=relayed) for relayed in (False, True))
    monkeypatch.setattr(auto, "SEARCH_MARGIN", 0.01)
    monkeypatch.setattr(auto, "RELAY_MARGIN", 0.5)
    assert search_margin(plain) == 0.01 and search_margin(relaying) == 0.5
    assert plain.to_dict()["relayed"] is False and relaying.to_dict()["relayed"] is True


def _search_calls(nodes, count):
    """Python function calls the search makes for ``count`` variables: its work, counted (not timed)."""
    variables = [_var("v{}".format(i), [(i % 37 + 1) * 64, 128], sparse=i % 50 == 0) for i in range(count)]
    builder, calls = AutoStrategy(calibration=_calibration()), [0]

    def profile(frame, event, arg):
        calls[0] += event == "call"
    sys.setprofile(profile)
    try:
        builder.search_variables(variables, nodes, Compute(0.05))
    finally:
        sys.setprofile(None)
    return calls[0]


def test_the_search_grows_linearly_in_the_variables(nodes):
    """A move is priced by its own variable's traffic (the module docstring): twice the variables, twice the work
    (re-pricing every variable per move would make it four times). 400 variables take ~0.7 s
    (``benchmarks/strategy_builders.py`` measures it)."""
    assert _search_calls(nodes, 200) <= 2.2 * _search_calls(nodes, 100)


def _all_reduce_at(sizes, variables, spec, compute, calibration):
    from autodist.strategies import AllReduce
    from autodist.strategies.auto import FUSE_ALL
    return {size: predict(AllReduce(chunk_size=FUSE_ALL, bucket_bytes=size).build_from_variables(variables, spec),
                          variables, compute, calibration.rounded()).step_s for size in sizes}


def test_hundreds_of_small_variables_are_priced_in_one_ring(nodes):
    """densenet121's 364 small tensors: AllReduce's default (128 members a group) makes 3 rings; the candidate
    AutoStrategy prices closes its buckets by bytes alone (as MWMS's packs), one ring, 2 (N - 1) messages fewer
    per extra ring, and its plan is that one group."""
    from autodist.strategies import AllReduce
    variables = [_var("conv{}/kernel".format(i), [256]) for i in range(364)]   # 1 KiB each
    calibration = _calibration(collective_latency_s=1e-3)   # every ring's messages visible at the step
    default = AllReduce().build_from_variables(variables, nodes)
    assert len({n.AllReduceSynchronizer.group for n in default.node_config}) == 3
    result = AutoStrategy(calibration=calibration).search_variables(variables, nodes, Compute(0.01))
    fused = dict(result.candidates)["AllReduce"].step_s
    assert fused < predict(default, variables, Compute(0.01), calibration.rounded()).step_s
    assert dict(result.candidates)["Parallax"].step_s > fused, "Parallax keeps AutoDist's 128 a group"
    assert result.chosen == "AllReduce"
    assert {n.AllReduceSynchronizer.group for n in result.strategy.node_config} == {0}


def test_all_reduce_is_priced_at_each_bucket_size(nodes):
    """On GPUs small buckets hide under backprop (all but the last): the AllReduce candidate is the cheapest
    of BUCKET_CHOICES; on CPUs nothing hides and the fewest rings (the default) win."""
    from autodist.strategies.all_reduce import DEFAULT_BUCKET_BYTES
    from autodist.strategies.auto import BUCKET_CHOICES
    variables = [_var("w{}".format(i), [1 << 20]) for i in range(24)]   # 4 MiB each, 96 MiB
    gpus = _spec_from([("10.0.0.{}".format(k), (0,), ()) for k in (1, 2)])
    fast_gpus = _calibration(overlap=1.0, collective_bandwidth=1e9, collective_latency_s=10e-6)
    priced = _all_reduce_at(BUCKET_CHOICES, variables, gpus, Compute(0.5), fast_gpus)
    best = min(BUCKET_CHOICES, key=lambda size: (round(priced[size], 9), BUCKET_CHOICES.index(size)))
    assert best != DEFAULT_BUCKET_BYTES and priced[best] < priced[DEFAULT_BUCKET_BYTES], priced
    result = AutoStrategy(calibration=fast_gpus).search_variables(variables, gpus, Compute(0.5))
    assert dict(result.candidates)["AllReduce"].step_s == pytest.approx(priced[best])
    assert result.arguments_of("AllReduce")["bucket_bytes"] == best, "the record names the size it priced"
    priced = _all_reduce_at(BUCKET_CHOICES, variables, nodes, Compute(0.5), _calibration())
    result = AutoStrategy(calibration=_calibration()).search_variables(variables, nodes, Compute(0.5))
    assert dict(result.candidates)["AllReduce"].step_s == pytest.approx(priced[DEFAULT_BUCKET_BYTES])
    assert result.arguments_of("AllReduce")["bucket_bytes"] == DEFAULT_BUCKET_BYTES
    assert min(priced.values()) == pytest.approx(priced[DEFAULT_BUCKET_BYTES])


def test_the_tail_of_small_variables_moves_as_one_block(nodes, monkeypatch):
    """Past SEARCH_HEAD variables the smallest move together: here all-reduced (one bucket, one message). One
    at a time, each small variable is priced against servers that still hold the others (their messages
    stay), and the search stops in a mix that costs more."""
    from autodist.strategies import auto, search
    variables = [_var("big", [1024, 1024])] + [_var("s{}".format(i), [16]) for i in range(60)]
    calibration = _calibration(rpc_latency_s=1e-3)   # a message to a server costs more than the small bytes
    monkeypatch.setattr(search, "SEARCH_HEAD", 1)
    tail = search.Search(variables, nodes, Compute(0.01), calibration, auto.STARTS[0])
    start_cost = tail.cost()
    entries = read_entries(tail.run()).variables
    assert {entries["s{}".format(i)].synchronizer.kind for i in range(60)} == {"ar"}
    assert tail.cost() < start_cost
    monkeypatch.setattr(search, "SEARCH_HEAD", 1000)   # every variable on its own
    alone = search.Search(variables, nodes, Compute(0.01), calibration, auto.STARTS[0])
    alone.run()
    assert tail.cost() < alone.cost()


def test_build_from_a_graph_uses_the_estimate_and_matches_search(graph_item, nodes):
    builder = AutoStrategy(calibration=_calibration())
    assert builder.build(graph_item, nodes).id == builder.search(graph_item, nodes).strategy.id
    assert builder.calibration(nodes) == _calibration().rounded()
    assert dataclasses.replace(_calibration(), source="prior").rounded().source == "prior"


def _plan(capsys, item_file, *argv):
    status = cli.main(["plan", "-r", TWO_NODES, "--format", "json", "--compute", "estimate"] + list(argv) + [item_file])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def item_file(graph_item, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "model.graph_item"
    graph_item.serialize(str(path))
    return str(path)


def test_plan_json_has_auto_and_every_plan_a_prediction(capsys, item_file):
    data = _plan(capsys, item_file, "-s", "AutoStrategy")
    assert set(data["auto"]) == {"chosen", "predicted_step_ms", "candidates"}
    assert [c["name"] for c in data["auto"]["candidates"]] == PRESETS + [SEARCHED]
    assert data["prediction"]["compute"] == "estimate" and data["prediction"]["batch"] == 32
    plain = _plan(capsys, item_file, "-s", "PSLoadBalancing")
    assert "auto" not in plain
    assert set(plain["prediction"]) >= {"predicted_step_ms", "comm_share", "compute_ms", "exposed_comm_ms"}
    assert 0.0 <= plain["prediction"]["comm_share"] <= 1.0


def test_plan_table_shows_the_candidates(capsys, item_file):
    status = cli.main(["plan", "-r", TWO_NODES, "-s", "AutoStrategy", "--compute", "estimate", item_file])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    assert any(line.startswith("predicted step ") for line in lines)
    chosen = [line for line in lines if line.startswith("  * ")]
    assert len(chosen) == 1
    assert sum(1 for line in lines if any(line[4:].startswith(name + " ") for name in PRESETS + [SEARCHED])) == 6
    data = _plan(capsys, item_file, "-s", "AutoStrategy")
    priced = [c["arguments"]["bucket_bytes"] for c in data["auto"]["candidates"] if c["name"] == "AllReduce"]
    assert [line for line in lines if line[4:].startswith("AllReduce ")][0].endswith(
        "buckets of " + exact_bytes(priced[0])), "the table names the bucket size the JSON records"
    assert (exact_bytes(16 << 20), exact_bytes(512 << 10), exact_bytes(1000)) == ("16 MiB", "512 KiB", "1000 B")
    assert "imbalance λ = " in lines[-1]


def test_measured_compute_is_cached_per_graph(graph_item, tmp_path):
    from autodist.strategies.cost import measure_compute
    first = measure_compute(graph_item, 8, steps=2, warmup=1, directory=str(tmp_path))
    assert first.source == "measured" and first.step_s > 0 and first.batch == 8
    assert first.sparse_rows == {"emb:0": 8.0}
    assert measure_compute(graph_item, 8, directory=str(tmp_path)) == first   # read back, not run again


def test_a_compute_cache_that_cannot_be_written_costs_only_the_cache(graph_item, tmp_path):
    """A full disk or a read-only home must not fail a plan (issue 33: what a full disk does)."""
    from autodist.strategies.cost import measure_compute
    (tmp_path / "file").write_text("not a directory")
    measured = measure_compute(graph_item, 8, steps=2, warmup=1, directory=str(tmp_path / "file" / "cache"))
    assert measured.source == "measured" and measured.step_s > 0


def test_estimated_rows_of_a_lookup_count_every_id_of_an_example():
    """``embedding_lookup`` flattens its ids: the gradient's indices are ``[None]``, the ids ``[None, 16]``."""
    import tensorflow as tf
    from autodist.strategies.cost.compute import estimate_rows
    with tf.Graph().as_default():
        ids = tf.compat.v1.placeholder(tf.int64, [None, 16])
        flat = tf.cast(tf.reshape(ids, [-1]), tf.int32)
        assert estimate_rows(flat, 256) == 16 * 256
        assert estimate_rows(tf.compat.v1.placeholder(tf.int64, [None]), 256) == 256
        assert estimate_rows(tf.reshape(tf.zeros([8, 4], tf.int64), [-1]), 256) == 32
        assert estimate_rows(tf.compat.v1.placeholder(tf.int64), 256) == 256   # nothing known: one an example


def test_a_tie_between_the_servers_goes_to_the_load_balanced_ones():
    """One node with two CPU devices: PS (every variable on the first) and PSLoadBalancing (spread over both)
    are predicted alike; PS measured 1.13x PSLoadBalancing's ResNet50 step there (startup_time.py)."""
    spec = _spec_from([("10.0.0.1", (), (0, 1))])
    variables = [_var("w{}".format(i), [256, 256]) for i in range(4)]
    result = AutoStrategy(calibration=_calibration()).search_variables(variables, spec, Compute(0.01))
    predictions = dict(result.candidates)
    assert predictions["PS"].step_s == predictions["PSLoadBalancing"].step_s
    assert result.chosen == "PSLoadBalancing" and _rule_holds(result), result.to_dict()


def test_a_dense_layer_on_a_flattened_sequence_counts_every_token():
    """``reshape(x, [-1, k])`` of a ``[None, 16, k]`` input: 16 rows an example, not one (BERT's dense layers
    were estimated at 1/12 of their float operations)."""
    import tensorflow as tf
    from autodist.strategies.cost.compute import forward_flops
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16, 32])
        w = tf.zeros([32, 64])
        tf.matmul(tf.reshape(x, [-1, 32]), w)                   # 8 x 16 rows of 32, times 64 columns
        tf.matmul(tf.zeros([4, 32]), w, transpose_a=False)      # known: 4 x 32 x 64
        tf.matmul(tf.zeros([32, 4]), w, transpose_a=True)       # the same product, its operand stored transposed
        tf.linalg.matmul(tf.reshape(x, [-1, 4, 32]), tf.zeros([32, 8]))   # batched: 8 x 16 rows of 32, times 8
    assert forward_flops(graph, 8) == 2.0 * (8 * 16 * 32 * 64 + 4 * 32 * 64 + 32 * 4 * 64 + 8 * 16 * 32 * 8)


def test_the_estimate_prices_each_op_and_the_bytes_it_writes():
    """A graph of many small ops costs their count at ``op_s`` and their outputs at the local bandwidth, beyond
    its float operations."""
    import tensorflow as tf
    from autodist.capture.graph_item import GraphItem
    from autodist.strategies.cost.compute import estimate_compute, step_ops
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 100])
        h = x
        for _ in range(50):
            h = tf.nn.relu(h)
        unused = tf.sin(x)   # noqa: F841, not part of the step
        train = tf.group(tf.reduce_sum(h), name="train")
    item = GraphItem(graph=graph)
    item.extend_train_ops([train])
    ops, nbytes = step_ops(item, 10)
    assert ops == 1 + 50 + 1 + 1 + 1   # the placeholder, 50 relus, the sum's axes, the sum, the group
    assert nbytes == 50 * 10 * 100 * 4 + 4   # every relu's output and the sum's; the fed x is not written
    calibration = _calibration(op_s=1e-6, local_bandwidth=1e9)
    assert estimate_compute(item, calibration, 10).step_s == pytest.approx(ops * 1e-6 + nbytes / 1e9)


def test_the_search_prices_a_plan_as_its_written_strategy():
    # small all-reduced variables on three nodes: gathered by the kernel, so N - 1 messages a hop
    from autodist.plan.contract import AllReduceEntry, variable_entry
    from autodist.strategies import PSLoadBalancing
    from autodist.strategies.search import Search as _Search
    from autodist.strategies.cost.traffic import step_traffic
    spec = _spec_from([("10.0.0.{}".format(k), (), (0,)) for k in (1, 2, 3)])
    variables = [_var("u", [300]), _var("v", [200])]
    search = _Search(variables, spec, Compute(0.01), _calibration(), PSLoadBalancing())
    for i, var in enumerate(variables):
        search._apply(var, search.entries[i], -1)
        search.entries[i] = variable_entry(var.name, var.op_name, [AllReduceEntry(group=0)])
        search._apply(var, search.entries[i], 1)
    written = step_traffic(search.strategy(), variables)
    links = {key: (link.bytes, link.messages) for key, link in search.traffic.links.items() if link.messages}
    assert links == {key: (pytest.approx(link.bytes), link.messages) for key, link in written.links.items()}
    assert {link.messages for link in written.links.values()} == {2}


@pytest.mark.parametrize("shared", [False, True], ids=["own-machines", "one-machine"])
@pytest.mark.parametrize("start", range(3), ids=["PSLoadBalancing", "with-proxies", "all-reduced"])
def test_every_start_of_the_search_ends_where_its_written_strategy_is_priced(nodes, start, shared):
    from autodist.strategies.auto import STARTS as _STARTS
    from autodist.strategies.search import Search as _Search
    from autodist.strategies.cost.traffic import relayed, step_traffic
    variables = _mlp() + [_var("emb", [100000, 64], sparse=True)]
    compute = Compute(0.03, sparse_rows={"emb:0": 512.0})
    calibration = _calibration(sparse_gather_s=2e-3)   # a sparse all-reduce's chain, once a step
    if shared:   # the two nodes on one machine: both prices bound their bytes together (cost.model.together_s)
        calibration = dataclasses.replace(calibration, machines={node: "one" for node in nodes.nodes})
    search = _Search(variables, nodes, compute, calibration, _STARTS[start])
    search.run()
    # the search prices all-reduce as collectives; a written mix on two nodes is relayed (priced below)
    written = step_traffic(search.strategy(), variables, compute.sparse_rows, relay=False)
    links = {key: (link.bytes, link.messages) for key, link in search.traffic.links.items() if link.messages}
    assert links == {key: (pytest.approx(link.bytes), link.messages) for key, link in written.links.items()}
    assert {k: v for k, v in search.traffic.waits.items() if v} == written.waits
    for field in ("server_bytes", "sparse_server_bytes", "sparse_apply_bytes", "sparse_gathers"):
        found = {k: v for k, v in getattr(search.traffic, field).items() if abs(v) > 1e-6}
        assert found == {k: pytest.approx(v) for k, v in getattr(written, field).items() if abs(v) > 1e-6}, field
    for node in search.nodes:
        assert search.traffic.local_bytes(node) == pytest.approx(written.local_bytes(node))
    if not relayed(read_entries(search.strategy()).variables.values(), search.replicas):
        assert search.cost() == pytest.approx(predict(search.strategy(), variables, compute, calibration).step_s
                                              - compute.step_s)


def test_a_computing_server_node_makes_the_search_proxy_or_all_reduce(nodes):
    # CPU replicas: reading a whole variable from the other node waits for its compute (30 ms);
    # the plain presets that hold whole variables pay it, the searched plan does not
    variables = [_var("k{}".format(i), [64, 64]) for i in range(8)]
    result = AutoStrategy(calibration=_calibration()).search_variables(variables, nodes, Compute(0.03))
    predictions = dict(result.candidates)
    assert predictions["PS"].wait_s == predictions["PSLoadBalancing"].wait_s == 0.03
    assert predictions[result.chosen].wait_s == 0.0
    assert predictions[SEARCHED].wait_s == 0.0


def test_gpu_replicas_never_wait_so_the_search_offers_no_proxies(monkeypatch):
    from autodist.strategies import search
    gpus = _spec_from([("10.0.0.{}".format(k), (0, 1), (0,)) for k in (1, 2)])
    variables = [_var("k{}".format(i), [64, 64]) for i in range(8)]
    made = []

    class Spy(search.Search):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(search, "Search", Spy)
    result = AutoStrategy(calibration=_calibration()).search_variables(variables, gpus, Compute(0.03))
    assert all(p.wait_s == 0.0 for _, p in result.candidates)
    assert len(made) == 2 and all(search.proxies == (False,) for search in made)   # no proxy start either
    assert not any(option.synchronizer.proxy for option in made[0].options(variables[0])
                   if option.synchronizer is not None and option.synchronizer.kind == "ps")


def test_a_split_variable_waits_for_every_node_that_holds_a_piece_of_it():
    # a node that holds pieces serves them from its one busy thread, as it would the whole variable
    from autodist.plan.contract import Partition, PSEntry, variable_entry, write_entry
    from autodist.proto import strategy_pb2
    from autodist.strategies.base import Strategy
    from autodist.strategies.cost.traffic import step_traffic
    w = _var("w", [1000, 1000])

    def waits(devices):
        proto = strategy_pb2.Strategy()
        entry = variable_entry(w.name, "w", [PSEntry(d, sync=True) for d in devices], Partition.of("w", 2, 0, 2))
        write_entry(proto.node_config.add(), entry)
        proto.graph_config.replicas.extend(["10.0.0.1:CPU:0", "10.0.0.2:CPU:0", "10.0.0.2:CPU:1"])
        return step_traffic(Strategy.with_content_id(proto), [w]).waits

    assert waits(["10.0.0.2:CPU:0", "10.0.0.2:CPU:1"]) == {("10.0.0.1", "10.0.0.2"): 2}   # both shards on one node
    assert waits(["10.0.0.1:CPU:0", "10.0.0.2:CPU:0"]) == {("10.0.0.2", "10.0.0.1"): 1,   # split over the nodes
                                                           ("10.0.0.1", "10.0.0.2"): 1}


def test_the_search_prices_a_member_of_unknown_shape_as_its_written_strategy():
    from autodist.strategies.auto import STARTS as _STARTS
    from autodist.strategies.search import Search as _Search
    from autodist.strategies.cost.traffic import step_traffic
    spec = _spec_from([("10.0.0.{}".format(k), (), (0,)) for k in (1, 2, 3)])
    variables = [_var("u", [300]), _var("v", [200]), _var("odd", None)]
    search = _Search(variables, spec, Compute(0.01), _calibration(), _STARTS[2])   # all in one group
    odd = variables[2]
    search._apply(odd, search.entries[2], -1)   # the unknown shape leaves the group: it may be gathered again
    search.entries[2] = search.options(odd)[1]
    search._apply(odd, search.entries[2], 1)
    written = step_traffic(search.strategy(), variables, relay=False)   # the search's view of the mix
    links = {key: (link.bytes, link.messages) for key, link in search.traffic.links.items() if link.messages}
    assert links == {key: (pytest.approx(link.bytes), link.messages) for key, link in written.links.items()}


def test_the_plan_command_says_which_margin_kept_the_preset(nodes):
    from autodist.cli.plan import _auto_lines
    from autodist.strategies import auto
    # the margin test's plan: 7 % cheaper than the best preset, relayed, so the preset stays
    variables = [_var("big", [4096, 1024])] + [_var("s{}".format(i), [16]) for i in range(100)]
    result = AutoStrategy(calibration=_calibration(collective_bandwidth=0.01e9)).search_variables(
        variables, nodes, Compute(0.01))
    assert result.chosen in PRESETS and dict(result.candidates)[SEARCHED].relayed
    text = "\n".join(_auto_lines(result))
    assert "at least {:.0%} cheaper; this one relays its all-reduce through the chief".format(auto.RELAY_MARGIN) in text
