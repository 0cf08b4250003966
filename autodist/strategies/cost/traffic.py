"""Bytes and messages per link per training step, read from a plan through the contract.

A link is ``(transport, source node, destination node)``; the transports are
``"rpc"`` (a parameter server's push and pull: TensorFlow's Send/Recv over
gRPC) and ``"collective"`` (all-reduce and all-gather rings). A link whose two
ends are the same node is an in-process copy. For a message of M bytes on N
replicas (the replicas in the plan's order, node-major)::

    PS on server node S         every node R sums its c replicas' gradients ((c - 1) M copied
                                in R), pushes R -> S (M, 1 message); every replica pulls
                                S -> R (M, 1 message); S aggregates M per node (sparse
                                rows apart: a sparse accumulator merges them at its own rate).
                                Pulls come before the step's compute, pushes after: a link
                                carries them one after the other (``StepTraffic.pulled``)
    ... fused pushes            a dense gradient of at most ``FUSED_PUSH_BYTES`` bound for a
                                synchronous server rides in one packed push per bucket
                                (``contract.fused_pushes``): its bytes as before, no message of
                                its own; every node sends each bucket's one message
                                (``fused_messages``)
    ... with a local proxy      a node R that keeps one (``kernel/.../proxy.py``: every node
                                but a CPU node holding the piece) gets the whole piece once
                                (P bytes, 1 message; a sparse piece too), written into the
                                proxy (P copied in R) by the chief's step after the update;
                                its replicas read the proxy
    ... waiting for S           a node R whose replicas read a piece of a synchronous variable
                                on another node S of CPU replicas, without a proxy, waits for
                                S's compute: S's one executor thread runs its own forward and
                                backward pass as one chain before it serves R's reads
                                (``waits``, ``docs/performance.md``); a variable split over
                                both nodes too (cnn: its dense kernel is read after the
                                convolutions have started; a searched plan that split it
                                measured 19.6 ms against AllReduce's 15.2)
    ring all-reduce of group G  hop i -> i+1 (mod N) carries 2 (N - 1) / N * G bytes in
                                2 (N - 1) messages; G is the group's fused bytes
    small group ((N-1) G <= 64 KiB, CPU replicas)
                                all-gathered instead (``contract.gathers``): each hop
                                carries (N - 1) * G bytes in N - 1 messages
    relayed all-reduce          on several nodes, a plan with parameter servers and all-reduce
                                relays every all-reduced gradient through the chief
                                (``kernel/synchronization/relay.py``: TensorFlow cannot run
                                collectives in steps that use servers across nodes): a node
                                sums its c replicas' gradients ((c - 1) M copied), pushes
                                M to the chief (the chief aggregates M per node) and gets
                                the mean back, one message each way per fused group; a
                                sparse one pushes its replicas' rows and gets every
                                replica's rows back, and applies the others' rows
    sparse all-reduce           ring all-gathers: each hop carries (N - 1) * R bytes in
                                3 (N - 1) messages, R the rows one replica touches padded to a
                                power of two (the kernel's all-gathers of the row counts,
                                values and indices); every replica then takes in and applies
                                the other replicas' rows (N - 1 times its own, beyond its
                                compute: ``sparse_apply_bytes``, at the rate the probe
                                measured for the kernel's own sparse all-reduce); the step waits
                                for the chain of gathers (``sparse_gathers``; the model's fixed
                                cost adds the probe's ``sparse_gather_s`` once)

A sparse gradient moves only the rows a replica touches (``sparse_rows``: rows
per replica and step, by variable name; a shard gets its share in proportion
to its rows), plus their int64 indices; without a row count it moves as its
dense size (the report's upper bound). Compressors shrink the all-reduced
message: Horovod's casts float32 to float16 (half the bytes), PowerSGD sends
two rank-r factors of a matrix, ``(rows + cols) * r`` elements in two rings.
"""
import functools
import math

from autodist.plan.contract import Compressor, fused_pushes, gathers, read_entries
from autodist.strategies.cost.ledger import COLLECTIVE, RPC, Link, StepTraffic
from autodist.strategies.cost.pushes import FusedPushes, fusable
from autodist.strategies.inputs import is_cpu, keeps_proxy, node_of
from autodist.strategies.report import pieces

__all__ = ["RPC", "COLLECTIVE", "SPARSE_GATHER_MESSAGES", "Link", "StepTraffic", "step_traffic", "relayed",
           "node_of", "wire_bytes", "add_entry", "group_messages", "group_overhead", "ring",
           "fused_messages", "plan_fused_pushes"]

_INDEX_BYTES = 8   # an int64 row index travels with every sparse row
#: Ring messages per hop of a sparse all-reduce, in units of N - 1: three all-gathers (row counts,
#: values, indices; ``kernel/synchronization/all_reduce.py``).
SPARSE_GATHER_MESSAGES = 3


def wire_bytes(sync, var, nbytes, sparse_rows=None):
    """Bytes one replica's gradient of a piece puts on the wire (compressed, or its touched rows)."""
    if var is not None and var.is_sparse and sparse_rows is not None and var.shape_known and var.shape[0]:
        row_bytes = var.byte_size / var.shape[0]
        rows = min(var.shape[0], sparse_rows) * nbytes / var.byte_size if var.byte_size else 0
        return min(float(nbytes), rows * (row_bytes + _INDEX_BYTES))
    if var is not None and var.grad_dtype is not None and var.grad_dtype != var.dtype and var.byte_size:
        nbytes = nbytes * var.grad_byte_size / var.byte_size   # a half gradient travels in half precision
    if sync.kind != "ar" or sync.compressor == Compressor.NoneCompressor:
        return float(nbytes)
    if sync.compressor == Compressor.PowerSGDCompressor and var is not None and var.shape_known \
            and len(var.shape) == 2 and nbytes:
        rows, cols = var.shape
        return min(float(nbytes), (rows + cols) * sync.powersgd_rank * nbytes / (rows * cols))
    if var is not None and var.dtype == "float32" and var.grad_dtype in (None, "float32"):
        return nbytes / 2.0
    return float(nbytes)


@functools.lru_cache(maxsize=64)
def _replica_nodes(replicas):
    """``((node, replicas on it), ...)`` in first-seen order."""
    counts = {}
    for replica in replicas:
        counts[node_of(replica)] = counts.get(node_of(replica), 0) + 1
    return tuple(counts.items())


@functools.lru_cache(maxsize=64)
def _ring_hops(replicas):
    """``((src node, dst node, hops), ...)`` of the ring over ``replicas`` (in order, wrapping)."""
    hops = {}
    n = len(replicas)
    for i, replica in enumerate(replicas):
        pair = (node_of(replica), node_of(replicas[(i + 1) % n]))
        hops[pair] = hops.get(pair, 0) + 1
    return tuple((src, dst, count) for (src, dst), count in hops.items())


@functools.lru_cache(maxsize=64)
def _first_replicas(replicas):
    """``{node: its first replica}``."""
    first = {}
    for replica in replicas:
        first.setdefault(node_of(replica), replica)
    return first


@functools.lru_cache(maxsize=64)
def _cpu_nodes(replicas):
    """The nodes whose first replica is a CPU device."""
    return frozenset(node for node, replica in _first_replicas(replicas).items() if is_cpu(replica))


def fused_messages(traffic, replicas, server, buckets, scale=1):
    """Add (``scale=-1``: take back) the one message per node and fused push to the ``server`` node."""
    for node, _ in _replica_nodes(tuple(replicas)):
        traffic.add(RPC, node, server, 0.0, scale * buckets)


def _ps(traffic, replicas, sync, message, scale, sparse, piece_bytes, fused=False):
    server = node_of(sync.destination)
    replicas = tuple(replicas)
    nodes = _replica_nodes(replicas)
    cpu = _cpu_nodes(replicas)
    for node, count in nodes:
        if count > 1:   # the node's replicas sum their gradients first (kernel: reduce_locally)
            traffic.add(RPC, node, node, scale * (count - 1) * message, scale * (count - 1))
        traffic.add(RPC, node, server, scale * message, 0 if fused else scale)   # a fused push: fused_messages
        if sync.proxy and keeps_proxy(_first_replicas(replicas)[node], sync.destination):
            traffic.add(RPC, server, node, scale * piece_bytes, scale, pull=True)
            traffic.add(RPC, node, node, scale * piece_bytes, scale)
            continue
        traffic.add(RPC, server, node, scale * count * message, scale * count, pull=True)
        if sync.sync and node != server and server in cpu:
            key = (node, server)
            traffic.waits[key] = traffic.waits.get(key, 0) + scale
    work = traffic.sparse_server_bytes if sparse else traffic.server_bytes
    work[server] = work.get(server, 0.0) + scale * len(nodes) * message


def ring(traffic, replicas, hop_bytes, messages):
    """Add one ring over ``replicas`` (in order, wrapping): every hop ``hop_bytes`` in ``messages``."""
    if len(replicas) < 2:
        return
    for src, dst, count in _ring_hops(tuple(replicas)):
        traffic.add(COLLECTIVE, src, dst, count * hop_bytes, count * messages)


def _next_power_of_two(rows):
    """The kernel pads gathered rows to a power of two (one collective shape per size)."""
    return 1 << max(0, math.ceil(math.log2(max(rows, 1)) - 1e-9))


def relayed(entries, replicas):
    """Whether the kernel relays the all-reduced gradients of ``entries`` through the chief: replicas
    on several nodes, and both parameter-server and all-reduced pieces (``relay.needs_relay``)."""
    kinds = {part.synchronizer.kind for entry in entries for part in (entry.parts or (entry,))}
    return len(_replica_nodes(tuple(replicas))) > 1 and {"ps", "ar"} <= kinds


def _relay(traffic, replicas, hub, message, scale, sparse):
    """One all-reduced piece relayed through the chief's node ``hub`` (messages: ``group_messages``)."""
    n = len(replicas)
    for node, count in _replica_nodes(tuple(replicas)):
        if count > 1 and not sparse:   # the node's replicas' gradients summed before the push
            traffic.add(RPC, node, node, scale * (count - 1) * message, 0)
        if node != hub:
            traffic.add(RPC, node, hub, scale * count * message if sparse else scale * message, 0)
            traffic.add(RPC, hub, node, scale * n * message if sparse else scale * message, 0, pull=True)
        if sparse:   # every replica applies the others' rows
            traffic.sparse_apply_bytes[node] = traffic.sparse_apply_bytes.get(node, 0.0) + scale * count * (
                n - 1) * message
    if not sparse:
        work = traffic.server_bytes
        work[hub] = work.get(hub, 0.0) + scale * len(_replica_nodes(tuple(replicas))) * message


def add_entry(traffic, entry, var, replicas, rows=None, scale=1, group_bytes=None, hub=None, fused=None):
    """Add (``scale=-1``: take back) one variable entry's traffic; returns ``{group: rings}`` of its
    dense all-reduced pieces, whose bytes are added here and whose messages count once per group
    (``group_messages``). ``group_bytes``, when given, sums each group's uncompressed bytes (a
    compressed piece makes its group's infinite: the kernel gathers only uncompressed buckets).
    ``hub``: the chief's node when the plan's all-reduce is relayed (``relayed``), else None.
    ``fused``: a :class:`FusedPushes` that decides which pieces are pushed fused and holds them (their
    messages are the buckets', ``fused_messages``), or None: every piece pushed alone."""
    n = len(replicas)
    groups = {}
    for name, sync, nbytes in pieces(entry, var):
        if sync is None:
            continue
        message = wire_bytes(sync, var, nbytes, rows)
        if sync.kind == "ps":
            joins = fused is not None and fused.joins(name, sync, var, message)
            if joins:
                fused.add(sync, var, message, scale)
            _ps(traffic, replicas, sync, message, scale, var is not None and var.is_sparse, float(nbytes), joins)
        elif hub is not None:
            sparse = var is not None and var.is_sparse
            _relay(traffic, replicas, hub, message, scale, sparse)
            group = ("sparse", var.name) if sparse else sync.group   # a sparse variable is relayed alone
            groups[group] = 1
        elif var is not None and var.is_sparse:
            padded = wire_bytes(sync, var, nbytes, _next_power_of_two(rows)) if rows else message
            ring(traffic, replicas, scale * (n - 1) * padded, scale * SPARSE_GATHER_MESSAGES * max(n - 1, 0))
            for node, count in _replica_nodes(tuple(replicas)):   # each replica applies the others' rows too
                work = traffic.sparse_apply_bytes
                work[node] = work.get(node, 0.0) + scale * count * (n - 1) * message
                if n > 1:   # and the node runs the gathers' chain (``sparse_gather_s``)
                    traffic.sparse_gathers[node] = traffic.sparse_gathers.get(node, 0) + scale
        else:
            ring(traffic, replicas, scale * 2.0 * (n - 1) / n * message, 0)
            rings = 2 if sync.compressor == Compressor.PowerSGDCompressor else 1
            groups[sync.group] = max(groups.get(sync.group, 0), rings)
            if group_bytes is not None:   # a compressed piece or an unknown shape: the kernel rings the group
                plain = sync.compressor == Compressor.NoneCompressor and (var is None or var.shape_known)
                group_bytes[sync.group] = (group_bytes.get(sync.group, 0.0) + scale * message) if plain else math.inf
    return groups


def group_messages(traffic, replicas, groups, group_bytes=None, hub=None):
    """Add the messages of the fused all-reduce groups ``{group: rings}`` (``group_overhead``), or of
    their relays through ``hub``: a push and a forward per other node and group."""
    for group in sorted(groups, key=str):
        if hub is not None:
            for node, _ in _replica_nodes(tuple(replicas)):
                if node != hub:
                    traffic.add(RPC, node, hub, 0.0, 1)
                    traffic.add(RPC, hub, node, 0.0, 1)
            continue
        group_overhead(traffic, replicas, groups[group], (group_bytes or {}).get(group))


def group_overhead(traffic, replicas, rings, nbytes, scale=1):
    """Add (``scale=-1``: take back) what one fused group costs beyond its pieces' ring bytes: 2 (N - 1)
    messages a ring and hop; a group of ``nbytes`` that the kernel all-gathers (``contract.gathers``)
    takes N - 1, and each hop carries (N - 1) times the bucket instead of the ring's 2 (N - 1) / N."""
    n = len(replicas)
    if rings == 1 and gathers(nbytes, replicas):
        ring(traffic, replicas, scale * (n - 1 - 2.0 * (n - 1) / n) * nbytes, scale * (n - 1))
    else:
        ring(traffic, replicas, 0.0, scale * 2 * (n - 1) * rings)


def step_traffic(strategy, variables, sparse_rows=None, chief=None, relay=None):
    """The :class:`StepTraffic` of ``strategy`` (a Strategy) for its planned ``variables``.

    ``sparse_rows``: ``{variable name: rows one replica touches per step}``. ``chief``: the
    spec's chief (its address), where relayed gradients go (default: the first replica's node).
    ``relay``: None prices all-reduce as the kernel runs it (``relayed``); False as collectives
    whatever the plan mixes (the search's view, ``strategies.auto``).
    """
    entries = read_entries(strategy)
    by_name = {v.name: v for v in variables}
    rows = sparse_rows or {}
    traffic = StepTraffic()
    groups, group_bytes = {}, {}
    relay = relayed(entries.variables.values(), entries.replicas) if relay is None else relay
    hub = (chief or node_of(entries.replicas[0])) if relay and entries.replicas else None
    fused, buckets = plan_fused_pushes(entries, by_name)
    for entry in entries.variables.values():
        for group, rings in add_entry(traffic, entry, by_name.get(entry.var_name), entries.replicas,
                                      rows.get(entry.var_name), group_bytes=group_bytes, hub=hub,
                                      fused=fused).items():
            groups[group] = max(groups.get(group, 0), rings)
    group_messages(traffic, entries.replicas, groups, group_bytes, hub)
    for server, count in sorted(buckets.items()):
        fused_messages(traffic, entries.replicas, server, count)
    traffic.last_bucket = _last_bucket(entries, by_name, group_bytes, hub)
    traffic.relay_hub = hub
    return traffic


def _last_bucket(entries, by_name, group_bytes, hub):
    """``(bytes, replicas)`` of the dense all-reduce group of the plan's first all-reduced variable (backprop
    computes the first layers' gradients last), or None (no such group, relayed, or of unknown size)."""
    if hub is not None:
        return None
    for entry in entries.variables.values():
        var = by_name.get(entry.var_name)
        for _, sync, _ in pieces(entry, var):
            if sync is not None and sync.kind == "ar" and not (var is not None and var.is_sparse):
                nbytes = group_bytes.get(sync.group)
                return (nbytes, len(entries.replicas)) if nbytes is not None and math.isfinite(nbytes) else None
    return None


def plan_fused_pushes(entries, by_name):
    """The plan's fused pushes as the kernel packs them (``contract.fused_pushes`` over its parameter-server
    pieces in plan order): a :class:`FusedPushes` of their names, and ``{server node: buckets}``."""
    found, destinations = [], {}
    for entry in entries.variables.values():
        var = by_name.get(entry.var_name)
        for name, sync, nbytes in pieces(entry, var):
            if sync is None or sync.kind != "ps":
                continue
            message = wire_bytes(sync, var, nbytes)
            dtype = (var.grad_dtype or var.dtype) if var is not None else ""
            found.append((name, sync.destination, dtype, message, fusable(sync, var, message)))
            destinations[name] = node_of(sync.destination)
    buckets = fused_pushes(found)
    server_of = {number: destinations[name] for name, number in buckets.items()}
    per_server = {}
    for server in server_of.values():
        per_server[server] = per_server.get(server, 0) + 1
    return FusedPushes(names=frozenset(buckets)), per_server
