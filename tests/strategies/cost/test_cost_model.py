"""The cost model's pieces on hand-computed cases: bytes per link, overlap, prediction, calibration cache."""
import dataclasses
import json
import os
import stat

import pytest

from autodist.plan.contract import (AllReduceEntry, Compressor, Partition, PSEntry, read_entries, variable_entry,
                                     write_entry)
from autodist.proto import strategy_pb2
from autodist.strategies import PS
from autodist.strategies.base import Strategy
from autodist.strategies.cost import (Calibration, Compute, load_calibration, predict, prior_calibration,
                                      save_calibration, step_traffic)
from autodist.strategies.cost.calibration import PROBE_VERSION, spec_key
from autodist.strategies.cost.model import exposed_comm_s, fixed_step_s, node_comm_s
from autodist.strategies.cost.traffic import COLLECTIVE, RPC, relayed

from strategy_inputs_for_tests import _spec_from, _var

A, B = "10.0.0.1", "10.0.0.2"


def _strategy(entries, replicas):
    proto = strategy_pb2.Strategy()
    for entry in entries:
        write_entry(proto.node_config.add(), entry)
    proto.graph_config.replicas.extend(replicas)
    return Strategy.with_content_id(proto)


def _links(traffic):
    return {key: (link.bytes, link.messages) for key, link in traffic.links.items()}


def _calibration(**changes):
    values = dict(rpc_latency_s=0.01, rpc_bandwidth=1000.0, rpc_duplex=1.0, collective_latency_s=0.02,
                  collective_bandwidth=500.0,
                  local_bandwidth=8000.0, update_bytes_per_s=8000.0, sparse_update_bytes_per_s=800.0, fixed_step_s=0.5,
                  round_trip_s=0.1, ps_step_s=0.3, overlap=0.5, flops=1e9)
    values.update(changes)
    return Calibration(**values)


def test_ps_push_and_pull_per_link():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    w = _var("W", [1000])   # 4000 bytes
    traffic = step_traffic(PS().build_from_variables([w], spec), [w])
    assert _links(traffic) == {(RPC, A, A): (8000.0, 2), (RPC, B, A): (4000.0, 1), (RPC, A, B): (4000.0, 1)}
    assert traffic.server_bytes == {A: 8000.0}
    assert traffic.sent(B, RPC) == (4000.0, 1) and traffic.received(B, RPC) == (4000.0, 1)
    assert traffic.local_bytes(A) == 8000.0 and traffic.local_bytes(B) == 0


def test_small_pushes_to_one_server_cost_one_message_per_bucket():
    """The kernel packs small dense synchronous pushes bound for one server (contract.fused_pushes): their
    bytes cross as before, in one message per node and bucket; a large variable still pushes alone."""
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    small = [_var("s{}".format(i), [16]) for i in range(3)]   # 64 bytes each
    big = _var("big", [100000])                                # 400 kB: past FUSED_PUSH_BYTES
    variables = small + [big]
    traffic = step_traffic(PS().build_from_variables(variables, spec), variables)
    assert _links(traffic)[(RPC, B, A)] == (3 * 64.0 + 400000.0, 2), "one fused push and the large one"
    assert _links(traffic)[(RPC, A, B)] == (3 * 64.0 + 400000.0, 4), "every variable is still pulled alone"
    async_plan = PS(sync=False).build_from_variables(variables, spec)
    assert _links(step_traffic(async_plan, variables))[(RPC, B, A)][1] == 4, "asynchronous pushes are not fused"


def test_ps_sums_a_nodes_replicas_before_pushing():
    spec = _spec_from([(A, (), (0, 1)), (B, (), (0,))])   # A runs two replicas, the server is B:CPU:0
    w = _var("W", [1000])
    entry = variable_entry(w.name, "W", [PSEntry(B + ":CPU:0", sync=True)])
    traffic = step_traffic(_strategy([entry], [A + ":CPU:0", A + ":CPU:1", B + ":CPU:0"]), [w])
    # A: one local sum (4000 B copied), one push; both replicas pull; B pushes and pulls locally
    assert _links(traffic) == {(RPC, A, A): (4000.0, 1), (RPC, A, B): (4000.0, 1), (RPC, B, A): (8000.0, 2),
                               (RPC, B, B): (8000.0, 2)}
    assert traffic.server_bytes == {B: 8000.0}   # one sum per node
    assert spec.num_cpus == 3


def test_partitioned_ps_shards_go_to_their_servers():
    w = _var("W", [10, 100])   # 4000 bytes, shards of 6 and 4 rows
    entry = variable_entry(w.name, w.op_name, [PSEntry(A + ":CPU:0", sync=True), PSEntry(B + ":CPU:0", sync=True)],
                           Partition.of("W", 2, 0, 2, (6, 4)))
    traffic = step_traffic(_strategy([entry], [A + ":CPU:0", B + ":CPU:0"]), [w])
    # B -> A: its push of shard 0 (2400) and the pull of shard 1 (1600), and A -> B the reverse
    assert _links(traffic) == {(RPC, A, A): (4800.0, 2), (RPC, B, A): (4000.0, 2), (RPC, A, B): (4000.0, 2),
                               (RPC, B, B): (3200.0, 2)}
    assert traffic.server_bytes == {A: 4800.0, B: 3200.0}


def test_ring_all_reduce_fuses_a_group_and_rings_the_replicas():
    replicas = [A + ":CPU:0", A + ":CPU:1", B + ":CPU:0"]
    u, v, other = _var("u", [30000]), _var("v", [500]), _var("x", [250])   # group 0: 122000 bytes, group 1: 1000
    entries = [variable_entry(u.name, "u", [AllReduceEntry(group=0)]),
               variable_entry(v.name, "v", [AllReduceEntry(group=0)]),
               variable_entry(other.name, "x", [AllReduceEntry(group=1)])]
    traffic = step_traffic(_strategy(entries, replicas), [u, v, other])
    # group 0 is rung: hop bytes 2 (N - 1) / N * G = 4/3 * 122000, 2 (N - 1) = 4 messages a hop;
    # group 1 is under GATHER_BYTES and all-gathered: (N - 1) * G = 2000 bytes, N - 1 = 2 messages a hop
    hop = (4.0 / 3.0 * 122000 + 2000, 6)
    links = _links(traffic)
    assert set(links) == {(COLLECTIVE, A, A), (COLLECTIVE, A, B), (COLLECTIVE, B, A)}
    for found in links.values():
        assert found == (pytest.approx(hop[0]), hop[1])
    assert traffic.exchanges() == (COLLECTIVE,)


def test_sparse_all_reduce_is_an_all_gather_of_the_touched_rows():
    emb = _var("emb", [100, 4], sparse=True)   # rows of 16 bytes, + 8 bytes of index each
    entry = variable_entry(emb.name, "emb", [AllReduceEntry()])
    strategy = _strategy([entry], [A + ":CPU:0", B + ":CPU:0"])
    traffic = step_traffic(strategy, [emb], {emb.name: 10})   # padded to 16 rows; 3 collectives of N - 1 = 1 message
    assert _links(traffic) == {(COLLECTIVE, A, B): (384.0, 3), (COLLECTIVE, B, A): (384.0, 3)}
    # each replica applies the other's 10 rows (240 bytes with their indices) beyond its own compute
    assert traffic.sparse_apply_bytes == {A: 240.0, B: 240.0} and traffic.sparse_server_bytes == {}
    calibration = _calibration(sparse_apply_bytes_per_s=400.0)   # the probe's rate for the kernel's gathers
    assert node_comm_s(traffic, A, calibration) == pytest.approx(384 / 500 + 3 * 0.02 + 240 / 400)
    # the step waits for the chain of gathers (the probe's sparse_gather_s) once, beside the round trip
    assert traffic.sparse_gathers == {A: 1, B: 1} and traffic.gathers_sparse()
    assert fixed_step_s(traffic, dataclasses.replace(calibration, sparse_gather_s=0.25)) == pytest.approx(
        0.5 + 0.1 + 0.25)
    other = _var("e2", [100, 4], sparse=True)
    two = _strategy([entry, variable_entry(other.name, "e2", [AllReduceEntry()])], [A + ":CPU:0", B + ":CPU:0"])
    both = step_traffic(two, [emb, other], {emb.name: 10, other.name: 10})
    assert both.sparse_gathers == {A: 2, B: 2} and fixed_step_s(
        both, dataclasses.replace(calibration, sparse_gather_s=0.25)) == pytest.approx(0.5 + 0.1 + 0.25)
    assert fixed_step_s(traffic, calibration) == pytest.approx(0.5 + 0.1)   # the prior adds nothing
    both.merge(traffic, -1)   # the search takes a variable's traffic back: one table left, then none
    assert both.sparse_gathers == {A: 1, B: 1} and both.gathers_sparse()
    both.merge(step_traffic(_strategy([variable_entry(other.name, "e2", [AllReduceEntry()])],
                                      [A + ":CPU:0", B + ":CPU:0"]), [other], {other.name: 10}), -1)
    assert not both.gathers_sparse()
    dense = step_traffic(strategy, [emb])   # no row count: its dense size, the upper bound
    assert dense.links[(COLLECTIVE, A, B)].bytes == 1600.0


@pytest.mark.parametrize("n", [2, 4])
def test_the_probes_chain_of_gathers_is_what_the_model_leaves_of_its_small_sparse_step(n):
    """The probe's ``sparse_gather_s``: the model, given it, prices the probe's own step of SPARSE_SMALL_TABLES
    sparse all-reduces of SPARSE_SMALL_ROWS rows (``ar_sparse_small``) at what it measured; the one-float
    collective step (``ar_step``) fits ``round_trip_s`` as the probe does."""
    from autodist.runtime.calibrate import probe as probe_module
    from autodist.runtime.calibrate.protocol import SPARSE_SMALL_ROWS, SPARSE_SMALL_TABLES, SPARSE_WIDTH
    nodes = ["10.0.0.{}".format(i + 1) for i in range(n)]
    tables = [_var("t{}".format(i), [4 * SPARSE_SMALL_ROWS, SPARSE_WIDTH], sparse=True)
              for i in range(SPARSE_SMALL_TABLES)]
    strategy = _strategy([variable_entry(v.name, "t{}".format(i), [AllReduceEntry()]) for i, v in enumerate(tables)],
                         [node + ":CPU:0" for node in nodes])
    t = {"local": 0.001, "sparse_local": 0.003, "ar_step": 0.004, "ar_sparse_small": 0.05}
    found = {"collective_bandwidth": 1e6, "collective_latency_s": 2e-4}
    gather = probe_module._sparse_gather_s(t, found, n)
    own_rate = probe_module._own_rows_rate(t)
    calibration = _calibration(fixed_step_s=t["local"], collective_latency_s=2e-4, collective_bandwidth=1e6,
                               round_trip_s=t["ar_step"] - t["local"] - (n - 1) * 2e-4, overlap=0.0,
                               sparse_apply_bytes_per_s=own_rate, sparse_gather_s=gather)
    own = SPARSE_SMALL_TABLES * probe_module._SMALL_MESSAGE / own_rate   # the own rows' apply: the replica's compute
    rows = {v.name: SPARSE_SMALL_ROWS for v in tables}
    predicted = predict(strategy, tables, Compute(own, sparse_rows=rows), calibration).step_s
    assert 0 < gather < t["ar_sparse_small"] and predicted == pytest.approx(t["ar_sparse_small"])


@pytest.mark.parametrize("compressor, expected_bytes, messages", [
    (Compressor.NoneCompressor, 20000.0, 1),    # 20 kB: under GATHER_BYTES, one all-gather message
    (Compressor.HorovodCompressor, 10000.0, 2),
    (Compressor.PowerSGDCompressor, 600.0, 4),   # (100 + 50) x rank 1 x 4 bytes, in two rings
])
def test_compressors_shrink_the_all_reduced_message(compressor, expected_bytes, messages):
    w = _var("W", [100, 50])
    strategy = _strategy([variable_entry(w.name, "W", [AllReduceEntry(compressor=compressor)])],
                         [A + ":CPU:0", B + ":CPU:0"])
    assert _links(step_traffic(strategy, [w]))[(COLLECTIVE, A, B)] == (expected_bytes, messages)


def test_overlap_hides_communication_under_backprop_only():
    assert exposed_comm_s(1.0, 3.0, 1.0) == 0.0                       # 2 s of backprop hide all of it
    assert exposed_comm_s(3.0, 3.0, 1.0) == pytest.approx(1.0)        # 2 of 3 s hidden
    assert exposed_comm_s(3.0, 3.0, 0.5) == pytest.approx(2.0)
    assert exposed_comm_s(3.0, 3.0, 0.0) == 3.0


def test_the_last_bucket_never_hides():
    """Backprop makes the first layers' gradients last: their bucket's ring runs after it, whatever it hid."""
    assert exposed_comm_s(1.0, 3.0, 1.0, last_s=0.4) == pytest.approx(0.4)
    assert exposed_comm_s(3.0, 3.0, 1.0, last_s=0.4) == pytest.approx(1.0), "already more exposed"
    assert exposed_comm_s(1.0, 3.0, 1.0, last_s=5.0) == pytest.approx(1.0), "never more than all of it"
    assert exposed_comm_s(1.0, 3.0, 0.0, last_s=0.4) == 1.0, "nothing hides on CPUs anyway"
    spec = _spec_from([(A, (0,), ()), (B, (0,), ())])
    variables = [_var("w{}".format(i), [1 << 18]) for i in range(8)]   # 1 MiB each, w0 first
    from autodist.strategies import AllReduce
    one = step_traffic(AllReduce(bucket_bytes=None).build_from_variables(variables, spec), variables)
    small = step_traffic(AllReduce(bucket_bytes=2 << 20).build_from_variables(variables, spec), variables)
    assert one.last_bucket == (8 << 20, 2) and small.last_bucket == (2 << 20, 2)


def test_prediction_of_a_ps_plan_by_hand():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    w = _var("W", [1000])
    strategy = PS().build_from_variables([w], spec)
    calibration = _calibration()
    traffic = step_traffic(strategy, [w])
    # A: 4000 B pulled by B, then 4000 B pushed by B (a step pulls before its compute and pushes after: two
    # phases on the link, each at 1000 B/s) + 1 message x 0.01 s; 8000 local B at 8000 B/s; 8000 B aggregated
    assert traffic.pulled(A) == (4000.0, 0.0) and traffic.pulled(B) == (0.0, 4000.0)
    assert node_comm_s(traffic, A, calibration) == pytest.approx(8.01 + 1.0 + 1.0)
    assert node_comm_s(traffic, B, calibration) == pytest.approx(8.01)
    prediction = predict(strategy, [w], Compute(3.0), calibration)
    # backprop 2 s x overlap 0.5 hides 1 s; fixed = 0.5 + the PS protocol's exchange (pull, push, token) 0.3;
    # B's reads of W wait for A's compute (3 s): A's replica is a CPU device; the wait hides under
    # the exposed communication (9.01 s)
    assert traffic.exchanges() == (RPC,)
    assert prediction.bottleneck == A
    assert prediction.wait_s == 3.0
    assert prediction.step_s == pytest.approx(3 + 0.8 + 9.01)
    assert prediction.comm_share == pytest.approx(9.01 / 12.81)
    data = prediction.to_dict()
    assert data["predicted_step_ms"] == pytest.approx(12810.0) and data["fixed_ms"] == 800.0
    assert data["wait_ms"] == 3000.0
    longer = predict(strategy, [w], Compute(9.0), calibration)   # a wait of 9 s: the communication hides under it
    assert longer.wait_s == 9.0 and longer.step_s == pytest.approx(9 + 0.8 + 9.0)


def test_reads_of_a_computing_cpu_node_wait_unless_proxied_async_or_on_gpus():
    w = _var("W", [1000])   # 4000 bytes

    def waits(sync, replicas, partition=None):
        pieces = [sync] if partition is None else [sync, dataclasses.replace(sync, destination=B + ":CPU:0")]
        entry = variable_entry(w.name, "W", pieces, partition)
        return step_traffic(_strategy([entry], replicas), [w]).waits

    cpus = [A + ":CPU:0", B + ":CPU:0"]
    assert waits(PSEntry(A + ":CPU:0", sync=True), cpus) == {(B, A): 1}
    assert waits(PSEntry(A + ":CPU:0", sync=True, proxy=True), cpus) == {}
    assert waits(PSEntry(A + ":CPU:0", sync=False), cpus) == {}
    # split over both nodes: each reads the other's piece, which waits for the other's compute
    assert waits(PSEntry(A + ":CPU:0", sync=True), cpus, Partition.of("W", 1, 0, 2)) == {(B, A): 1, (A, B): 1}
    assert waits(PSEntry(A + ":CPU:0", sync=True), [A + ":GPU:0", B + ":GPU:0"]) == {}
    assert waits(PSEntry(A + ":CPU:0", sync=True), [B + ":CPU:0"]) == {}   # A computes nothing


def test_a_proxy_pulls_the_whole_piece_once_per_node_and_copies_it():
    spec = _spec_from([(A, (), (0,)), (B, (), (0, 1))])
    emb = _var("E", [1000, 4], sparse=True)   # 16000 bytes
    entry = variable_entry(emb.name, "E", [PSEntry(A + ":CPU:0", sync=True, proxy=True)])
    traffic = step_traffic(_strategy([entry], [A + ":CPU:0", B + ":CPU:0", B + ":CPU:1"]), [emb], {"E:0": 10})
    rows = 10 * (16 + 8)   # a replica's touched rows and their indices
    # B sums its two replicas' rows (one local copy), pushes them, and refreshes its proxy: the whole
    # table over the wire once and into the copy; A holds E, pushes and reads its rows where they are
    assert _links(traffic) == {(RPC, A, A): (2 * rows, 2), (RPC, B, B): (rows + 16000.0, 2),
                               (RPC, B, A): (rows, 1), (RPC, A, B): (16000.0, 1)}
    assert traffic.waits == {}


def test_half_duplex_sends_and_receives_in_turn():
    w, v = _var("W", [1000]), _var("V", [1000])   # 4000 B each, W on A's server, V on B's
    entries = [variable_entry(w.name, "W", [PSEntry(A + ":CPU:0", sync=True)]),
               variable_entry(v.name, "V", [PSEntry(B + ":CPU:0", sync=True)])]
    traffic = step_traffic(_strategy(entries, [A + ":CPU:0", B + ":CPU:0"]), [w, v])
    # pulls: B gets W while A gets V (4000 B each way at once), then pushes likewise: 4 + 4 s both ways at
    # once, 8 + 8 s in turn, 6 + 6 s half way; + 2 messages x 0.01 s; V's local pull and push (8000 B at
    # 8000 B/s) and its two pushes aggregated (8000 B at 8000 B/s)
    assert traffic.pulled(B) == (4000.0, 4000.0)
    assert node_comm_s(traffic, B, _calibration(rpc_duplex=1.0)) == pytest.approx(8.02 + 2.0)
    assert node_comm_s(traffic, B, _calibration(rpc_duplex=0.0)) == pytest.approx(16.02 + 2.0)
    assert node_comm_s(traffic, B, _calibration(rpc_duplex=0.5)) == pytest.approx(12.02 + 2.0)


def test_a_step_pulls_then_pushes_so_one_node_cannot_overlap_them():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    w = _var("W", [1000])
    traffic = step_traffic(PS().build_from_variables([w], spec), [w])
    # B receives its pull (4000 B), then sends its push (4000 B): 8 s however duplex its link is
    for duplex in (0.0, 0.5, 1.0):
        assert node_comm_s(traffic, B, _calibration(rpc_duplex=duplex)) == pytest.approx(8.01)


def test_one_node_prediction_is_deterministic_and_counts_local_copies():
    spec = _spec_from([(A, (), (0,))])
    w = _var("W", [1000])
    strategy = PS().build_from_variables([w], spec)
    first = predict(strategy, [w], Compute(0.2), _calibration())
    assert first == predict(strategy, [w], Compute(0.2), _calibration())
    # push + pull 8000 B at 8000 B/s, 4000 B aggregated at 8000 B/s; backprop hides 0.5 x 2/3 x 0.2 s
    assert first.step_s == pytest.approx(0.2 + 0.5 + 1.0 + 0.5 - 0.5 * 2 / 3 * 0.2)


def test_prior_comes_from_network_bandwidth():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    prior = prior_calibration(spec)
    assert prior.rpc_bandwidth == prior.collective_bandwidth == 1e9 / 8   # the schema's default 1 Gbit/s
    assert prior.source == "prior" and prior.overlap == 0.0
    assert prior_calibration(_spec_from([(A, (0,), (0,))])).overlap == 1.0


def test_calibration_cache_is_private_and_keyed_by_the_nodes(tmp_path):
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    directory = str(tmp_path / "calibration")
    assert load_calibration(spec, directory) is None
    measured = _calibration(source="probe", probe_version=PROBE_VERSION)
    path = save_calibration(spec, measured, directory)
    assert load_calibration(spec, directory) == measured
    save_calibration(spec, _calibration(source="probe", probe_version=PROBE_VERSION - 1), directory)
    assert load_calibration(spec, directory) is None   # an older probe measured something else: probe again
    save_calibration(spec, measured, directory)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert spec_key(spec) != spec_key(_spec_from([(A, (), (0,)), (B, (), (0, 1))]))
    assert load_calibration(_spec_from([(A, (), (0,))]), directory) is None


def test_rounded_calibration_keeps_two_significant_digits():
    rounded = _calibration(rpc_bandwidth=123456.0, fixed_step_s=0.001234).rounded()
    assert rounded.rpc_bandwidth == 120000.0 and rounded.fixed_step_s == 0.0012


def test_sparse_rows_on_a_parameter_server_are_merged_at_the_sparse_rate():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    emb = _var("emb", [100, 4], sparse=True)   # 10 rows of 16 bytes + 8 bytes of index: 240 B a push
    entry = variable_entry(emb.name, "emb", [PSEntry(B + ":CPU:0", sync=True)])
    traffic = step_traffic(_strategy([entry], [A + ":CPU:0", B + ":CPU:0"]), [emb], {emb.name: 10})
    assert traffic.sparse_server_bytes == {B: 480.0} and traffic.server_bytes == {}
    # B: 240 B pulled, then 240 B pushed, at 1000 B/s + 1 message x 0.01 s; 240 B local push and pull at
    # 8000 B/s; 480 B at 800 B/s
    assert node_comm_s(traffic, B, _calibration()) == pytest.approx(0.48 + 0.01 + 480 / 8000 + 480 / 800)


def test_a_mixed_plan_on_two_nodes_relays_its_all_reduce_through_the_chief():
    w, v, e = _var("W", [10]), _var("V", [10]), _var("E", [100, 4], sparse=True)   # 40 B; rows of 16 + 8 B
    entries = [variable_entry(w.name, "W", [PSEntry(B + ":CPU:0", sync=True)]),
               variable_entry(v.name, "V", [AllReduceEntry(group=0)]),
               variable_entry(e.name, "E", [AllReduceEntry(group=0)])]
    strategy = _strategy(entries, [A + ":CPU:0", B + ":CPU:0"])
    assert relayed(read_entries(strategy).variables.values(), [A + ":CPU:0", B + ":CPU:0"])
    traffic = step_traffic(strategy, [w, v, e], {e.name: 10}, chief=A)
    # W: B's server pulls and pushes; V: B pushes 40 B to A, gets the mean back; E: B pushes its 10 rows
    # (240 B), gets both replicas' (480 B); one message each way per relayed group (V's, E's) and for W
    assert _links(traffic) == {(RPC, A, B): (40.0 + 40 + 480, 3), (RPC, B, A): (40.0 + 40 + 240, 3),
                               (RPC, B, B): (80.0, 2)}
    assert traffic.exchanges() == (RPC,)   # no collective in the step
    assert traffic.server_bytes == {B: 80.0, A: 80.0}   # W's accumulator on B, V's relay accumulator on A
    assert traffic.sparse_apply_bytes == {A: 240.0, B: 240.0}
    elsewhere = step_traffic(strategy, [w, v, e], {e.name: 10}, chief=B)   # the chief is the hub
    assert elsewhere.links[(RPC, A, B)].bytes == 40.0 + 40 + 240 and elsewhere.server_bytes[B] == 160.0
    alone = step_traffic(_strategy(entries[1:], [A + ":CPU:0", B + ":CPU:0"]), [v, e], {e.name: 10})
    assert not any(transport == RPC for transport, _, _ in alone.links)   # all-reduce alone: collectives


def test_a_plan_with_a_parameter_server_and_a_ring_pays_the_longer_exchange():
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    w, v = _var("W", [10]), _var("V", [10])
    entries = [variable_entry(w.name, "W", [PSEntry(B + ":CPU:0", sync=True)]),
               variable_entry(v.name, "V", [AllReduceEntry(group=0)])]
    replicas = [A + ":CPU:0", B + ":CPU:0"]
    both = step_traffic(_strategy(entries, replicas), [w, v], relay=False)   # the search's view: V rung
    assert both.exchanges() == (RPC, COLLECTIVE)
    assert fixed_step_s(both, _calibration()) == pytest.approx(0.5 + 0.3)                   # ps_step_s 0.3
    assert fixed_step_s(both, _calibration(round_trip_s=0.4)) == pytest.approx(0.5 + 0.4)   # the ring's, longer
    ring = step_traffic(_strategy(entries[1:], replicas), [v])
    assert fixed_step_s(ring, _calibration()) == pytest.approx(0.5 + 0.1)
    local = [variable_entry(w.name, "W", [PSEntry(A + ":CPU:0", sync=True)])]
    alone = step_traffic(_strategy(local, [A + ":CPU:0"]), [w])   # one node: nothing to exchange
    assert alone.exchanges() == () and fixed_step_s(alone, _calibration()) == 0.5


def test_a_cache_written_before_a_field_existed_is_not_used(tmp_path):
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    directory = str(tmp_path / "calibration")
    path = save_calibration(spec, _calibration(source="probe"), directory)
    old = json.loads(open(path).read())
    del old["ps_step_s"]
    with open(path, "w") as handle:
        json.dump(old, handle)
    assert load_calibration(spec, directory) is None


def test_synchronized_batch_norm_adds_a_round_trip_per_exchange_and_its_bytes():
    """Its exchanges sit on the step's critical path (the forward pass waits for each): collectives' round trips
    under all-reduce, a synchronous server's exchange when a plan with servers on two nodes relays them."""
    from autodist.strategies import AllReduce, AutoStrategy
    from autodist.strategies.cost.model import statistics_s
    from autodist.strategies.inputs import BatchStatistics
    spec = _spec_from([(A, (), (0,)), (B, (), (0,))])
    w = _var("W", [1000])
    calibration = _calibration()
    statistics = BatchStatistics(exchanges=4, bytes=500)
    assert statistics_s(statistics, False, calibration) == pytest.approx(4 * 0.1 + 2 * 500 / 500.0)
    assert statistics_s(statistics, True, calibration) == pytest.approx(4 * 0.3 + 2 * 500 / 1000.0)
    assert statistics_s(BatchStatistics(), True, calibration) == 0.0
    for builder, relayed in ((AllReduce(), False), (PS(), True)):
        strategy = builder.build_from_variables([w], spec)
        plain = predict(strategy, [w], Compute(3.0), calibration)
        synced = predict(strategy, [w], Compute(3.0), calibration, statistics=statistics)
        assert synced.statistics_s == pytest.approx(statistics_s(statistics, relayed, calibration))
        assert synced.step_s == pytest.approx(plain.step_s + synced.statistics_s)
        assert synced.to_dict()["statistics_ms"] == pytest.approx(synced.statistics_s * 1e3)
    # AutoStrategy prices every candidate with them: many exchanges make relaying plans the dearer
    many = BatchStatistics(exchanges=100, bytes=0)
    result = AutoStrategy(calibration=calibration).search_variables([w], spec, Compute(3.0), calibration, many)
    prices = dict(result.candidates)
    assert prices["AllReduce"].statistics_s == pytest.approx(100 * 0.1)
    assert prices["PS"].statistics_s == pytest.approx(100 * 0.3)
    assert result.chosen == "AllReduce"


def test_a_ring_between_two_replicas_of_a_node_is_priced_at_the_local_collective_rate():
    """Two CPU replicas of one node: the ring's bytes go through TensorFlow's collective executor (4.4 GB/s
    measured here against 11-20 GB/s for a copy), the PS plan's local sum is a copy. Before, both were copies, and
    AutoStrategy chose AllReduce for ResNet50 on one node where it measured 1.3x PSLoadBalancing's step."""
    from autodist.strategies import AllReduce
    spec = _spec_from([(A, (), (0, 1))])
    w = _var("W", [1000])   # 4000 bytes
    ring = step_traffic(AllReduce().build_from_variables([w], spec), [w])
    assert ring.local_ring_bytes(A) == 8000.0 and ring.local_bytes(A) == 0.0   # two hops of 2 (N - 1) / N x 4000
    summed = step_traffic(PS().build_from_variables([w], spec), [w])
    assert summed.local_ring_bytes(A) == 0.0 and summed.local_bytes(A) > 0.0
    fast, slow = _calibration(local_collective_bandwidth=8000.0), _calibration(local_collective_bandwidth=2000.0)
    assert node_comm_s(ring, A, slow) - node_comm_s(ring, A, fast) == pytest.approx(8000.0 / 2000 - 8000.0 / 8000)
    assert node_comm_s(summed, A, slow) == node_comm_s(summed, A, fast)
    assert prior_calibration(_spec_from([(A, (0, 1), ())])).local_collective_bandwidth == \
        prior_calibration(spec).local_bandwidth   # GPUs' rings are NCCL's: the prior's local bandwidth


def test_nodes_on_one_machine_move_no_more_than_their_collective_bandwidths_together():
    """Nodes that share a machine (the probe read one kernel on them): a plan that funnels every node's bytes
    through one node is priced at least at every byte sent over their collective bandwidths together (the
    probe's figure with every node moving at once): 8 emulated hosts on 2 cores moved a relay through the chief
    at that rate, not at the rpc figure of one transfer. A ring, which spreads the same bytes evenly, is priced
    as before; nodes on machines of their own are not bound so."""
    from autodist.strategies import AllReduce
    from autodist.strategies.cost.model import together_s
    nodes = [A, B, "10.0.0.3", "10.0.0.4"]
    spec = _spec_from([(node, (), (0,)) for node in nodes])
    w = _var("W", [1000])   # 4000 bytes
    apart = _calibration(rpc_bandwidth=1e9, rpc_latency_s=0.0, collective_latency_s=0.0, overlap=0.0,
                         local_bandwidth=1e12, update_bytes_per_s=1e12)
    calibration = dataclasses.replace(apart, machines={node: "one kernel" for node in nodes})
    served = step_traffic(PS().build_from_variables([w], spec), [w])
    # three pushes into A, three pulls out of it: 24000 bytes sent, at 4 x 500 bytes/s
    assert together_s(served, nodes, calibration) == pytest.approx(24000.0 / 2000)
    busiest = max(node_comm_s(served, node, calibration) for node in nodes)
    assert busiest < 1e-3   # A alone, at the rpc figure, would take 12000 / 1e9 s each way
    plan = predict(PS().build_from_variables([w], spec), [w], Compute(1.0), calibration)
    assert plan.comm_s == pytest.approx(12.0) and plan.bottleneck == "machine of " + ", ".join(sorted(nodes))
    assert plan.to_dict()["bottleneck"] == plan.bottleneck   # what ``autodist plan --format json`` shows
    # apart: no machines known, or each node on its own, or one pair sharing (only the pair's bytes count)
    assert together_s(served, nodes, apart) == 0.0
    assert together_s(served, nodes, dataclasses.replace(apart, machines={n: n for n in nodes})) == 0.0
    pair = dataclasses.replace(apart, machines={A: "m", B: "m", "10.0.0.3": "x", "10.0.0.4": "y"})
    assert together_s(served, nodes, pair) == pytest.approx((12000.0 + 4000.0) / 1000)
    assert predict(PS().build_from_variables([w], spec), [w], Compute(1.0), pair).bottleneck == \
        "machine of {}, {}".format(*sorted([A, B]))   # the machine that binds, named by its own nodes
    plan = predict(PS().build_from_variables([w], spec), [w], Compute(1.0), apart)
    assert plan.comm_s == pytest.approx(busiest) and plan.bottleneck == A   # apart: the busiest node, the server
    ring = step_traffic(AllReduce().build_from_variables([w], spec), [w])
    per_node = node_comm_s(ring, A, calibration)   # so small a bucket is all-gathered: 3 x 4000 bytes a node
    assert per_node == pytest.approx(12000.0 / 500) and together_s(ring, nodes, calibration) == pytest.approx(per_node)
    ringed = predict(AllReduce().build_from_variables([w], spec), [w], Compute(1.0), calibration)
    assert ringed.comm_s == pytest.approx(per_node) and ringed.bottleneck == A   # a tie: the node, not the machine
    assert together_s(step_traffic(PS().build_from_variables([w], _spec_from([(A, (), (0, 1))])), [w]), [A],
                      calibration) == 0.0   # one node


def test_a_prediction_says_whether_the_kernel_relays_and_rounding_keeps_the_machines():
    from autodist.strategies import AllReduce, Parallax
    w, emb = _var("W", [1000]), _var("emb", [1000, 8], sparse=True)
    two, one = _spec_from([(A, (), (0,)), (B, (), (0,))]), _spec_from([(A, (), (0, 1))])
    calibration = _calibration(machines={A: "m", B: "m"})
    # Parallax: the sparse table on a server, the dense kernel all-reduced: relayed on two nodes only
    assert predict(Parallax().build_from_variables([w, emb], two), [w, emb], Compute(1.0), calibration).relayed
    assert not predict(Parallax().build_from_variables([w, emb], one), [w, emb], Compute(1.0), calibration).relayed
    assert not predict(AllReduce().build_from_variables([w], two), [w], Compute(1.0), calibration).relayed
    assert calibration.rounded().machines == {A: "m", B: "m"}
