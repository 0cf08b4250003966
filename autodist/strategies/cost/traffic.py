"""Bytes and messages per link per training step, read from a plan through the contract.

A link is ``(transport, source node, destination node)``; the transports are
``"rpc"`` (a parameter server's push and pull: TensorFlow's Send/Recv over
gRPC) and ``"collective"`` (all-reduce and all-gather rings). A link whose two
ends are the same node is an in-process copy. For a message of M bytes on N
replicas (the replicas in the plan's order, node-major)::

    PS on server node S         every replica r (on node R): push R -> S (M, 1 message),
                                pull S -> R (M, 1 message); S aggregates N * M bytes
    ring all-reduce of group G  hop i -> i+1 (mod N) carries 2 (N - 1) / N * G bytes in
                                2 (N - 1) messages; G is the group's fused bytes
    sparse all-reduce           a ring all-gather: each hop carries (N - 1) * R bytes in
                                N - 1 messages, R the rows one replica touches

A sparse gradient moves only the rows a replica touches (``sparse_rows``: rows
per replica and step, by variable name; a shard gets its share in proportion
to its rows), plus their int64 indices; without a row count it moves as its
dense size (the report's upper bound). Compressors shrink the all-reduced
message: Horovod's casts float32 to float16 (half the bytes), PowerSGD sends
two rank-r factors of a matrix, ``(rows + cols) * r`` elements in two rings.
"""
import dataclasses
from typing import Dict, Tuple

from autodist.kernel.contract import Compressor, read_entries
from autodist.strategies.report import pieces

__all__ = ["RPC", "COLLECTIVE", "Link", "StepTraffic", "step_traffic", "node_of", "wire_bytes"]

RPC = "rpc"
COLLECTIVE = "collective"
_INDEX_BYTES = 8   # an int64 row index travels with every sparse row


def node_of(device):
    """``"10.0.0.1:CPU:0" -> "10.0.0.1"`` (names parse from the right, IPv6 has colons)."""
    return device.rsplit(":", 2)[0]


@dataclasses.dataclass
class Link:
    """What crosses one link in one step."""

    bytes: float = 0.0
    messages: int = 0


@dataclasses.dataclass
class StepTraffic:
    """Per-step traffic of a plan: ``links[(transport, src, dst)]`` and the servers' work."""

    links: Dict[Tuple[str, str, str], Link] = dataclasses.field(default_factory=dict)
    server_bytes: Dict[str, float] = dataclasses.field(default_factory=dict)   # node -> bytes aggregated

    def add(self, transport, src, dst, nbytes, messages=1):
        link = self.links.setdefault((transport, src, dst), Link())
        link.bytes += nbytes
        link.messages += messages

    def sent(self, node, transport):
        """``(bytes, messages)`` ``node`` sends to other nodes over ``transport``."""
        return _total(link for (t, s, d), link in self.links.items() if t == transport and s == node != d)

    def received(self, node, transport):
        return _total(link for (t, s, d), link in self.links.items() if t == transport and d == node != s)

    def local_bytes(self, node):
        """Bytes copied inside ``node`` (a replica and a server, or two replicas, of one node)."""
        return sum(link.bytes for (_, s, d), link in self.links.items() if s == d == node)

    def nodes(self):
        found = {s for _, s, _ in self.links} | {d for _, _, d in self.links} | set(self.server_bytes)
        return sorted(found)


def _total(links):
    nbytes, messages = 0.0, 0
    for link in links:
        nbytes += link.bytes
        messages += link.messages
    return nbytes, messages


def wire_bytes(sync, var, nbytes, sparse_rows=None):
    """Bytes one replica's gradient of a piece puts on the wire (compressed, or its touched rows)."""
    if var is not None and var.is_sparse and sparse_rows is not None and var.shape_known and var.shape[0]:
        row_bytes = var.byte_size / var.shape[0]
        rows = min(var.shape[0], sparse_rows) * nbytes / var.byte_size if var.byte_size else 0
        return min(float(nbytes), rows * (row_bytes + _INDEX_BYTES))
    if sync.kind != "ar" or sync.compressor == Compressor.NoneCompressor:
        return float(nbytes)
    if sync.compressor == Compressor.PowerSGDCompressor and var is not None and var.shape_known \
            and len(var.shape) == 2 and nbytes:
        rows, cols = var.shape
        return min(float(nbytes), (rows + cols) * sync.powersgd_rank * nbytes / (rows * cols))
    if var is not None and var.dtype == "float32":
        return nbytes / 2.0
    return float(nbytes)


def _ps(traffic, replicas, sync, message):
    server = node_of(sync.destination)
    for replica in replicas:
        node = node_of(replica)
        traffic.add(RPC, node, server, message)
        traffic.add(RPC, server, node, message)
    traffic.server_bytes[server] = traffic.server_bytes.get(server, 0.0) + len(replicas) * message


def _ring(traffic, replicas, hop_bytes, messages):
    n = len(replicas)
    if n < 2:
        return
    for i, replica in enumerate(replicas):
        traffic.add(COLLECTIVE, node_of(replica), node_of(replicas[(i + 1) % n]), hop_bytes, messages)


def step_traffic(strategy, variables, sparse_rows=None):
    """The :class:`StepTraffic` of ``strategy`` (a Strategy) for its planned ``variables``.

    ``sparse_rows``: ``{variable name: rows one replica touches per step}``.
    """
    entries = read_entries(strategy)
    by_name = {v.name: v for v in variables}
    rows = sparse_rows or {}
    replicas = entries.replicas
    n = len(replicas)
    traffic = StepTraffic()
    groups = {}          # dense all-reduce: group -> fused bytes
    for entry in entries.variables.values():
        var = by_name.get(entry.var_name)
        for _, sync, nbytes in pieces(entry, var):
            if sync is None:
                continue
            message = wire_bytes(sync, var, nbytes, rows.get(entry.var_name))
            if sync.kind == "ps":
                _ps(traffic, replicas, sync, message)
            elif var is not None and var.is_sparse:
                _ring(traffic, replicas, (n - 1) * message, max(n - 1, 0))
            else:
                rings = 2 if sync.compressor == Compressor.PowerSGDCompressor else 1
                fused, count = groups.get(sync.group, (0.0, 0))
                groups[sync.group] = (fused + message, max(count, rings))
    for group in sorted(groups):
        fused, rings = groups[group]
        if n > 1:
            _ring(traffic, replicas, 2.0 * (n - 1) / n * fused, 2 * (n - 1) * rings)
    return traffic
