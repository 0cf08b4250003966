"""The calibration probe: TensorFlow's own transport between the spec's nodes, measured.

    calibration = probe(spec)        # starts a TensorFlow server per node, measures, stops them

A multi-node spec gets a short job of its own (``runtime.launch.coordinator``: on
every other node the job's script is ``python -m autodist.runtime.calibrate.protocol``,
that node's client of the protocol steps, whose process hosts the node's
server as a training script's does), and this process drives every other measurement from the
chief's in-process server; a one-node spec is measured in a local session.
The chief's in-process server lives until the process ends, so call the
probe from a process that does nothing else with TensorFlow servers
(``autodist calibrate`` does). Each figure is the median of ``repeats`` runs
(of one step, or of :data:`.protocol.STEPS` protocol steps): a job's step
time is a median over steps too, on a machine as busy as it is while the
probe runs (the fastest run would describe an idle machine)::

    fixed_step_s         a step that reads one float on the chief
    rpc bandwidth        BIG bytes / (fetch of the BIG variable on the next node - of 1 float)
    rpc duplex           BIG both ways at once vs one way: 1 = no slower, 0 = twice as slow
    rpc latency          (ps_many - ps_one) / (PS_VARIABLES - 1): what one more variable adds to
                         the synchronous PS protocol, every node running its own client
    ps_step_s            ps_one - fixed_step_s - rpc latency: the protocol's own cost (pull, push,
                         take, apply, release and wait for the token) with one 1-float variable
    sparse update rate   the servers' sparse rows / (ps_sparse - ps_one - the other nodes' rows pulled, then
                         pushed, on the server's link); where nothing measurable is left (the wire
                         explains the step), the own rows' rate
    sparse apply rate    the other nodes' rows / (ar_sparse - ar_step - the gathers' bytes on the ring
                         and their 2 (N - 1) messages beyond the gather's - sparse_gather_s
                         - sparse_local - local): what a
                         replica of a sparse all-reduce does with the rows it takes in, beyond its own
                         (``sparse_local``: SGD's apply of one node's rows on the chief alone); where
                         nothing measurable is left (slow links), the own rows' rate
    sparse_gather_s      ar_sparse_small less what the model charges that step without it (a collective
                         step's round trip; per small table 3 (N - 1) messages, bytes and apply): the
                         chain of gathers (row counts, then rows), once a step; measured before the
                         sparse apply rate, whose residual it leaves
    collective latency   (32 tiny all-reduces - 1) / 31 / 2 (N - 1) messages of a hop
    collective bandwidth 2 (N - 1) / N * COLLECTIVE_BYTES / (ar_big - ar_step - (N - 1)
                         collective latencies, the ring's messages beyond the gather's): a 16 MiB
                         all-reduce that every node runs from its own client, as the kernel's
                         buckets do
    round_trip_s         ar_step - fixed_step_s - (N - 1) collective latencies: a one-float
                         all-reduce that every node runs from its own client, by all-gather as
                         the kernel's small buckets go (N - 1 messages a hop)
    update rate          BIG / (assign_add of BIG on the chief - a step on the chief alone)
    local bandwidth      an in-process copy of BIG bytes (numpy)
    flops                a 512 x 512 matrix product of a variable on the chief's CPU (- the same)
    op_s                 (a chain of OP_CHAIN sines of one float on the chief - a step there) / OP_CHAIN:
                         what an op costs beyond its arithmetic (``cost.compute.estimate_compute``)
    local collective     2 BIG bytes (both hops) / (an all-reduce of BIG between two CPU devices of the
    bandwidth            chief - a step there): a ring between two CPU replicas of one node (the collective
                         executor, not a copy: 4.4 GB/s against 11-20 GB/s here); a chief with one CPU
                         keeps the prior, GPUs the local bandwidth (their rings are NCCL's, not measured)
    link_bandwidth       every node's link rate, from slices of 1-64 MiB moved between every pair of
                         nodes (beyond 4 nodes the chief's pairs and a ring; ``links``); the model
                         scales the transports per node by it
    machines             every node's kernel (a hash of ``BOOT_ID`` read there, not timed): nodes on
                         one machine share its cores, which move all their bytes (``cost.model.together_s``)

With one node the transports are in-process: latencies, ``ps_step_s`` and
``round_trip_s`` are 0 and bandwidths the local one. ``overlap`` is 1 with
GPUs (all-reduce runs under backprop) and 0 on CPUs (the replica's own cores
move the bytes).
"""
import functools
import hashlib
import json
import os
import statistics
import tempfile
import time

from autodist.strategies.cost.calibration import PROBE_VERSION, Calibration
from autodist.runtime.calibrate.links import link_graph, measure_links, median_time, node_rates
from autodist.runtime.calibrate.protocol import (COLLECTIVE_BYTES, MEASUREMENTS, MEMBER_TIMEOUT, PS_VARIABLES,
                                               SPARSE_ROWS, SPARSE_SMALL_ROWS, SPARSE_SMALL_TABLES, SPARSE_WIDTH,
                                               STEPS, TABLE_ROWS, protocol_graph, sparse_rows, steps_of,
                                               task_devices, time_protocol)
from autodist.strategies.cost.traffic import SPARSE_GATHER_MESSAGES

__all__ = ["probe", "default_repeats", "slow_links", "BIG_BYTES", "SMALL_COUNT", "OP_CHAIN", "STAGES", "REPEATS", "SLOW_REPEATS"]

BIG_BYTES = COLLECTIVE_BYTES   # every big transfer the size of the protocol's big all-reduce: 16 MiB
SMALL_COUNT = 32
OP_CHAIN = 1000   # ops in a row on one float: the executor's cost of an op
_LOCAL_RING_GROUP, _LOCAL_RING_KEY = 9, 9001   # the chief's two CPUs' all-reduce, apart from the other collectives
#: Timed runs per measurement: REPEATS, or SLOW_REPEATS where the spec's slowest link moves the 16 MiB ring
#: all-reduce in more than SLOW_RUN_S a run. A run then varies little (the multi-host calibrate tests read
#: shaped links within 15 % from 3), and 1 + 7 runs of every big measurement made a probe of 4 hosts at
#: 105 Mbit/s take 268 s, and one of 8 hosts at 250 Mbit/s (0.94 s a ring) outran AutoStrategy's bound then,
#: 300 s (``first_probe.probe_timeout``).
REPEATS, SLOW_REPEATS, SLOW_RUN_S = 7, 3, 0.5
#: What names a running kernel: nodes that read the same here share one machine's cores (``machines``).
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def default_repeats(spec):
    """REPEATS, or SLOW_REPEATS on links the spec says are slow (``slow_links``)."""
    return SLOW_REPEATS if slow_links(spec) else REPEATS


def slow_links(spec):
    """Whether the spec's slowest link (``network_bandwidth``, Gbit/s) moves the 16 MiB ring in over SLOW_RUN_S."""
    n = len(spec.nodes)
    if n < 2:
        return False
    slowest = min(spec.network_bandwidth.values()) * 1e9 / 8
    ring_s = 2.0 * (n - 1) / n * COLLECTIVE_BYTES / max(slowest, 1.0)
    return ring_s > SLOW_RUN_S


def _best_time(session, fetches, repeats):
    """The median time of a step of ``fetches``, run as a callable (as a job's repeated steps are)."""
    return median_time(session.make_callable(fetches), repeats)


def _local_bandwidth(np, repeats):
    src = np.ones(BIG_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    times = []
    for _ in range(repeats):   # each copy timed, the first too (PROBE_VERSION's figures)
        started = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - started)
    return BIG_BYTES / max(statistics.median(times), 1e-9)


def _graph(tf, devices, ring=()):
    """The probe's ops: ``{name: fetch}`` on ``devices`` (the chief's CPU first, one per node); ``ring``: two CPU
    devices of the chief, or none."""
    from tensorflow.python.ops import collective_ops
    tf1, n, elements = tf.compat.v1, len(devices), BIG_BYTES // 4
    ops = {}
    with tf.device(devices[-1]):
        small = [tf1.Variable(tf.zeros([1]), name="small{}".format(i)) for i in range(SMALL_COUNT)]
        big = tf1.Variable(tf.zeros([elements]), name="big")
    with tf.device(devices[0]):
        back = tf1.Variable(tf.zeros([elements]), name="back")
        local_big = tf1.Variable(tf.zeros([elements]), name="local_big")
        local_small = tf1.Variable(tf.zeros([1]), name="local_small")
        matrix = tf1.Variable(tf.ones([512, 512]), name="matrix")
        table = tf1.Variable(tf.zeros([TABLE_ROWS, SPARSE_WIDTH]), name="table", use_resource=True)
        ids, values = sparse_rows(tf, 0)
        ops["sparse_local"] = table.scatter_sub(tf.IndexedSlices(0.01 * values, ids)).op
        ops["local"] = tf.reduce_sum(local_small.read_value())
        ops["one"] = tf.reduce_sum(small[0].read_value())
        ops["many"] = tf.add_n([tf.reduce_sum(v.read_value()) for v in small])
        ops["big"] = tf.reduce_sum(big.read_value()[:1])
    with tf.device(devices[-1]):
        returned = tf.reduce_sum(back.read_value()[:1])
    with tf.device(devices[0]):
        ops["both"] = ops["big"] + returned
        ops["update"] = local_big.assign_add(tf.ones([elements])).op
        value = matrix.read_value()
        ops["matmul"] = tf.reduce_sum(tf.matmul(value, value)[:1])
        chain = local_small.read_value()
        for _ in range(OP_CHAIN):   # nothing to fold or fuse: each op waits for the one before
            chain = tf.math.sin(chain)
        ops["ops"] = tf.reduce_sum(chain)
    if len(ring) > 1:
        local_ring = []
        for device in ring:
            with tf.device(device):
                local_ring.append(tf.reduce_sum(collective_ops.all_reduce_v2(
                    tf.ones([elements]), len(ring), _LOCAL_RING_GROUP, _LOCAL_RING_KEY, merge_op="Add",
                    final_op="Id")[:1]))
        ops["ar_local"] = local_ring
    if n > 1:
        for key, size, count in (("ar_one", 1, 1), ("ar_many", 1, SMALL_COUNT)):
            done = []
            for device in devices:
                with tf.device(device):
                    x = tf.ones([size])
                    done += [tf.reduce_sum(collective_ops.all_reduce_v2(
                        x, n, 1, 1 + len(ops) * 100 + i, merge_op="Add", final_op="Id")[:1]) for i in range(count)]
            ops[key] = done
    return ops, [v.initializer for v in small + [big, back, local_big, local_small, matrix, table]]


def _duplex(one_way, both_ways):
    """1 when both directions take as long as one, 0 when they take twice as long."""
    if one_way <= 0:
        return 1.0
    return min(1.0, max(0.0, (2.0 * one_way - both_ways) / one_way))


#: What each measurement moves or runs, for the progress lines (``probe(progress=...)``).
STAGES = {"sparse_local": "a sparse update on the chief", "local": "a step on the chief",
          "one": "one float from the last node", "many": "{} small variables from the last node".format(SMALL_COUNT),
          "big": "16 MiB from the last node", "both": "16 MiB each way at once", "update": "a 16 MiB update",
          "matmul": "a 512 x 512 matrix product", "ops": "a chain of {} one-float ops".format(OP_CHAIN),
          "ar_local": "a 16 MiB all-reduce between two CPUs of the chief",
          "ar_one": "a one-float all-reduce",
          "ar_many": "{} tiny all-reduces".format(SMALL_COUNT), "ps_one": "the PS protocol, one variable",
          "ps_many": "the PS protocol, {} variables".format(PS_VARIABLES), "ps_sparse": "the PS protocol, sparse rows",
          "ar_step": "the collective protocol, one float", "ar_big": "the collective protocol, 16 MiB",
          "ar_sparse": "the collective protocol, sparse rows",
          "ar_sparse_small": "the collective protocol, {} small sparse tables".format(SPARSE_SMALL_TABLES),
          "links": "every pair of nodes' link"}


def _timings(tf, target, config, devices, repeats, progress=None, ring=(), slow=False):
    """``{measurement: seconds}``: the chief's one-session steps, then the protocol steps every node
    runs with it (``protocol.member_main`` on the others). ``progress(done, total, key)`` is called
    before each measurement (``STAGES`` says what ``key`` measures)."""
    graph = tf.Graph()
    with graph.as_default():
        steps, protocol_initializers = protocol_graph(tf, devices)
        ops, initializers = _graph(tf, devices, ring)
        links, link_initializers = link_graph(tf, devices) if len(devices) > 1 else ({}, [])
    with tf.compat.v1.Session(target, graph=graph, config=config) as session:
        session.run(initializers + protocol_initializers + link_initializers)
        stages = [(key, functools.partial(_best_time, session, fetch, repeats)) for key, fetch in ops.items()]
        stages += [(key, functools.partial(time_protocol, session, steps[key][0], steps_of(slow).get(key, STEPS),
                                           repeats=repeats)) for key in MEASUREMENTS if key in steps]
        if links:
            stages.append(("links", functools.partial(measure_links, session, links, min(repeats, 3))))
        t = {}
        for done, (key, measure) in enumerate(stages):
            if progress is not None:
                progress(done, len(stages), key)
            t[key] = measure()
        t["machines"] = _machine_ids(tf, session, graph, devices) if len(devices) > 1 else []
    return t


def _machine_ids(tf, session, graph, devices):
    """Each device's machine, in order: a hash of ``BOOT_ID`` read on its node (only equality matters), or None
    where the node cannot say (not Linux): the model then takes it for a machine of its own."""
    with graph.as_default():
        reads = []
        for device in devices:
            with tf.device(device):
                reads.append(tf.io.read_file(BOOT_ID))
    found = []
    for read in reads:
        try:
            found.append(hashlib.sha256(session.run(read).strip()).hexdigest()[:16])
        except tf.errors.OpError:
            found.append(None)
    return found


def _measure(tf, np, target, config, devices, repeats, progress=None, ring=(), slow=False):
    """The calibration's measured fields (see the module docstring for each formula)."""
    t = _timings(tf, target, config, devices, repeats, progress, ring, slow)
    n, local = len(devices), _local_bandwidth(np, repeats)
    found = dict(fixed_step_s=t["local"], local_bandwidth=local,
                 flops=2.0 * 512 ** 3 / max(t["matmul"] - t["local"], 1e-6),
                 op_s=max(t["ops"] - t["local"], 0.0) / OP_CHAIN,
                 update_bytes_per_s=BIG_BYTES / max(t["update"] - t["local"], 1e-6))
    if "ar_local" in t:   # k hops of 2 (k - 1) / k x BIG inside the node, as the model counts a node's ring bytes
        found["local_collective_bandwidth"] = 2.0 * (len(ring) - 1) * BIG_BYTES / max(t["ar_local"] - t["local"],
                                                                                      1e-6)
    if n == 1:
        found.update(rpc_latency_s=0.0, rpc_bandwidth=local, rpc_duplex=1.0, collective_latency_s=0.0,
                     collective_bandwidth=local, round_trip_s=0.0, ps_step_s=0.0)
        found["sparse_update_bytes_per_s"] = _sparse_rate(t, found, n)
        found["sparse_apply_bytes_per_s"] = _own_rows_rate(t)
        return found
    latency = max(t["ar_many"] - t["ar_one"], 0.0) / (SMALL_COUNT - 1) / (2 * (n - 1))
    # ar_big is a ring (2 (N - 1) messages), ar_step a gather (N - 1): the rest of the difference is bytes
    ring_bytes_s = max(t["ar_big"] - t["ar_step"] - (n - 1) * latency, 1e-6)
    found.update(rpc_latency_s=max(t["ps_many"] - t["ps_one"], 0.0) / (PS_VARIABLES - 1),
                 rpc_bandwidth=BIG_BYTES / max(t["big"] - t["one"], 1e-6),
                 rpc_duplex=_duplex(t["big"] - t["one"], t["both"] - t["one"]),
                 collective_latency_s=latency,
                 collective_bandwidth=2.0 * (n - 1) / n * COLLECTIVE_BYTES / ring_bytes_s)
    found.update(ps_step_s=max(t["ps_one"] - t["local"] - found["rpc_latency_s"], 0.0),
                 round_trip_s=max(t["ar_step"] - t["local"] - (n - 1) * found["collective_latency_s"], 0.0))
    found["sparse_update_bytes_per_s"] = _sparse_rate(t, found, n)
    found["sparse_gather_s"] = _sparse_gather_s(t, found, n)
    found["sparse_apply_bytes_per_s"] = _sparse_apply_rate(t, found, n)
    rates = node_rates(t["links"], n)   # by device index; the rpc figures came from the last node to the chief
    found["link_bandwidth"] = dict(enumerate(rates))
    found["machines"] = {i: name for i, name in enumerate(t["machines"]) if name is not None}
    found["link_reference"] = {"rpc": t["links"][(0, n - 1)], "collective": min(rates)}
    return found


#: One node's sparse rows on the wire: float32 values and an int64 index a row.
_SPARSE_MESSAGE = SPARSE_ROWS * (SPARSE_WIDTH * 4 + 8)


#: A residual under 1 / _UNMEASURED of what applying the rows at the own rows' rate takes is noise.
_UNMEASURED = 100.0


def _own_rows_rate(t):
    """Bytes a second of SGD's apply of one node's sparse rows on the chief alone (``sparse_local``)."""
    return _SPARSE_MESSAGE / max(t["sparse_local"] - t["local"], 1e-6)


def _sparse_rate(t, found, n):
    """Servers' sparse rate: the sparse step's time beyond the one-variable step and the wire, per byte.

    The wire is what the model charges the server's link (``cost.model``): the other N - 1 nodes' pulls
    of their rows, then their pushes (before: one node's rows, so on 8 hosts at 250 Mbit/s the other
    six nodes' bytes on the server's link read as a merge at 26 MB/s, the link's own rate). Where the
    wire already explains the step (what is left is noise, or below zero), the rate is the own rows'
    apply (``sparse_local``), not the 2e12 B/s a clamped residual gave (2 hosts at 1.4 Gbit/s), which
    priced the servers' merge of ncf's rows as free."""
    merged = n * _SPARSE_MESSAGE
    wire = 2.0 * (n - 1) * _SPARSE_MESSAGE / found["rpc_bandwidth"] if n > 1 else 0.0
    left = t["ps_sparse"] - t["ps_one"] - wire
    own_rate = _own_rows_rate(t)
    return merged / left if left > merged / own_rate / _UNMEASURED else own_rate


def _sparse_apply_rate(t, found, n):
    """A sparse all-reduce's rate on the other nodes' rows: its step beyond a collective step, the
    gathers on the ring, their chain (``sparse_gather_s``, which the model charges apart) and the node's
    own rows' apply, per byte of the others' rows.

    Where the wire and the node's own apply already explain the whole step (a slow link: the residual
    is within the noise, or below zero) nothing is left to measure; the rate is then the one of the
    node's own rows (``sparse_local``), not the 1e12 B/s a clamped residual would give, which priced
    the apply as free."""
    others = (n - 1) * _SPARSE_MESSAGE
    wire = others / found["collective_bandwidth"] + 2 * (n - 1) * found["collective_latency_s"]
    own = max(t["sparse_local"] - t["local"], 0.0)
    left = t["ar_sparse"] - t["ar_step"] - wire - found["sparse_gather_s"] - own
    own_rate = _own_rows_rate(t)
    return others / left if left > others / own_rate / _UNMEASURED else own_rate


#: One node's rows of one small sparse all-reduce on the wire (``ar_sparse_small``).
_SMALL_MESSAGE = SPARSE_SMALL_ROWS * (SPARSE_WIDTH * 4 + 8)


def _sparse_gather_s(t, found, n):
    """What a step's sparse all-reduces add to what the model charges them: SPARSE_SMALL_TABLES of them in a
    step (``ar_sparse_small``) less the model's price of that step without the chain (at least 0).

    The model prices it as a collective step, ``ar_step`` less its gather's N - 1 messages (the round trip,
    ``round_trip_s``), and per table 3 (N - 1) messages, the others' rows on the ring and their apply, and
    the own rows' apply; the rows are few (applied at the own rows' rate here), so what is left is the
    chain of gathers (row counts, then values and indices), which the tables run side by side: the model
    adds it once a step (``model.fixed_step_s``)."""
    latency, own_rate = found["collective_latency_s"], _own_rows_rate(t)
    charged = ((n - 1) * _SMALL_MESSAGE / found["collective_bandwidth"]
               + SPARSE_GATHER_MESSAGES * (n - 1) * latency + n * _SMALL_MESSAGE / own_rate)
    step = t["ar_step"] - (n - 1) * latency + SPARSE_SMALL_TABLES * charged
    return max(t["ar_sparse_small"] - step, 0.0)


def probe(spec, repeats=None, sink=None, progress=None):
    """Measure ``spec``'s cluster: a :class:`Calibration` (``source="probe"``), each figure the median of
    ``repeats`` timed runs (default: ``default_repeats(spec)``).

    ``progress(done, total, key)``, if given, is called before each of the ``total`` measurements
    (``STAGES[key]`` says what it measures): on slow links the probe takes minutes."""
    import numpy as np
    import tensorflow as tf
    from autodist.spec.cluster import cpu_count_of, node_config
    chief = next(n for n in spec.node_specs if n.chief)
    repeats = default_repeats(spec) if repeats is None else repeats
    if len(spec.nodes) == 1:
        ring = _chief_ring("/device:CPU:0", cpu_count_of(chief))
        found = _measure(tf, np, "", node_config(cpu_count_of(chief), 0), ["/device:CPU:0"], repeats, progress, ring)
    else:
        found = _probe_job(spec, repeats, sink, tf, np, node_config, cpu_count_of(chief), progress)
    if spec.num_gpus:   # GPU replicas' rings are NCCL's, not the CPUs' measured here
        found["local_collective_bandwidth"] = found["local_bandwidth"]
    return Calibration(overlap=1.0 if spec.num_gpus else 0.0, source="probe", probe_version=PROBE_VERSION, **found)


def _chief_ring(first_cpu, cpus):
    """Two CPU devices of the chief (``first_cpu`` and the next), where it has two, for the local ring."""
    import tensorflow as tf
    second = tf.DeviceSpec.from_string(first_cpu).replace(device_index=1).to_string()
    return (first_cpu, second) if cpus > 1 else ()


def _probe_job(spec, repeats, sink, tf, np, node_config, chief_cpus, progress):
    from autodist.spec.cluster import cpu_count_of
    from autodist.runner import new_job_id
    from autodist.runtime.launch.coordinator import Coordinator
    coordinator = Coordinator(spec, new_job_id(), sink=sink)
    with tempfile.TemporaryDirectory(prefix="autodist-probe-") as staging:
        empty = os.path.join(staging, "strategy.pb")
        open(empty, "wb").close()   # the job ships no strategy: the coordinator copies an empty file
        # every other node's client hosts its node's server, as a job's script does (one process per node)
        nodes = json.dumps({n.address: [cpu_count_of(n), n.threads or 0, list(n.cores)] for n in spec.node_specs})
        slow = slow_links(spec)   # every node runs the same step counts (``protocol.steps_of``)
        context = coordinator.launch(empty, ["-m", "autodist.runtime.calibrate.protocol", "--repeats", str(repeats),
                                             "--nodes", nodes] + (["--slow"] if slow else []), os.getcwd(),
                                     serve_chief=True)
    try:
        config = node_config(chief_cpus, context.chief_task)
        config.operation_timeout_in_ms = int(MEMBER_TIMEOUT * 1e3)   # a node that never joins fails the step
        devices = task_devices(context)[0]
        found = _measure(tf, np, context.target, config, devices, repeats, progress,
                         _chief_ring(devices[0], chief_cpus), slow)
        order = [context.chief_task] + [t for t in range(context.num_tasks) if t != context.chief_task]
        found["link_bandwidth"] = {context.addresses[order[i]]: rate for i, rate in found["link_bandwidth"].items()}
        found["machines"] = {context.addresses[order[i]]: name for i, name in found["machines"].items()}
        return found
    finally:
        coordinator.finish(timeout=60.0)
