"""What a plan (a Strategy) costs: per-variable rows, per-device bytes and the load imbalance λ.

``autodist plan`` prints this; tests and benchmarks call it directly::

    report = plan_report(strategy, builder_variables(graph_item), resource_spec, builder)
    print(format_table(report))          # or json.dumps(report.to_dict())

Traffic per training step, for a message of M bytes and N replicas (device
level: transfers between devices of one node count too; a sparse gradient is
counted as its dense size, an upper bound; a gradient computed in half precision
under mixed precision travels, and is counted, at its own size G = M / 2):

- ring all-reduce: every replica sends and receives ``2 (N - 1) / N * G``;
- parameter server: every replica pushes its gradient (sends G) and pulls the
  new value (receives M); the server receives ``N * G`` and sends ``N * M``.
- synchronized batch norm (``inputs.BatchStatistics``): its exchanges (a sum
  over every replica, forward and backward, of S bytes in all) move like an
  all-reduce of S, ``2 (N - 1) / N * S`` each way per replica, or, relayed
  through the chief beside parameter servers across nodes, S each way; the
  report counts them apart (``PlanReport.statistics``) and in the devices' bytes.

Bytes held: a server holds the variables (shards) placed on it; every replica
holds a copy of each all-reduced variable; a PS variable with a local proxy has
one copy on the first replica of every node, except on a node of CPU replicas
that holds the variable itself (``kernel/synchronization/proxy.py``). λ = max /
mean of the bytes held by the candidate servers (every CPU device, and any
other device a PS node names); 1.0 when no variable uses a parameter server,
as all replicas then hold the same bytes.

The strategy is read through ``autodist.plan.contract`` (the kernel reads
the same entries), so the report shows what the kernel will do.
"""
import dataclasses
from typing import Optional, Tuple

from autodist.plan.contract import read_entries
from autodist.strategies.inputs import BatchStatistics, keeps_proxy, node_of, relays_statistics

__all__ = ["ShardRow", "VariableRow", "DeviceRow", "PlanReport", "plan_report", "format_table",
           "ring_all_reduce_bytes", "ps_push_pull_bytes", "load_imbalance",
           "human_bytes", "exact_bytes", "pieces"]

_SYNCHRONIZER_NAMES = {"ps": "PS", "ar": "AllReduce"}


def ring_all_reduce_bytes(message_bytes, num_replicas):
    """Bytes each replica sends (and receives) in a ring all-reduce of ``message_bytes``."""
    return 2.0 * (num_replicas - 1) / num_replicas * message_bytes


def ps_push_pull_bytes(message_bytes, num_replicas):
    """``(replica sends, replica receives, server sends, server receives)`` per step."""
    return message_bytes, message_bytes, num_replicas * message_bytes, num_replicas * message_bytes


@dataclasses.dataclass(frozen=True)
class ShardRow:
    """One synchronized piece: a shard, or the whole variable when it is not partitioned."""

    name: str
    placement: object   # server device name (PS) or group number (all-reduce)
    bytes: int


@dataclasses.dataclass(frozen=True)
class VariableRow:
    name: str
    shape: Optional[Tuple[Optional[int], ...]]
    dtype: str
    bytes: int
    sparse: bool
    synchronizer: str   # "PS", "AllReduce" or "none"
    placement: Tuple   # server devices (PS) or group numbers (all-reduce), per shard
    partitioner: str
    shard_sizes: Tuple[int, ...]   # extents along the split axis (explicit or the even split)
    compressor: str
    shards: Tuple[ShardRow, ...]


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    device: str
    roles: Tuple[str, ...]   # "replica", "server"
    held_bytes: int
    sent_bytes: int
    received_bytes: int


@dataclasses.dataclass(frozen=True)
class PlanReport:
    strategy_id: str
    builder: str
    replicas: Tuple[str, ...]
    variables: Tuple[VariableRow, ...]
    devices: Tuple[DeviceRow, ...]
    imbalance: float
    num_servers: int
    statistics: Optional[dict] = None   # synchronized batch norm: exchanges, bytes per replica and step, relayed

    def to_dict(self):
        """Plain JSON-ready data (``autodist plan --format json``)."""
        return {
            "strategy_id": self.strategy_id,
            "builder": self.builder,
            "replicas": list(self.replicas),
            "variables": [_variable_dict(v) for v in self.variables],
            "devices": [dataclasses.asdict(d) | {"roles": list(d.roles)} for d in self.devices],
            "imbalance": self.imbalance,
            "servers": self.num_servers,
            "total_bytes": sum(v.bytes for v in self.variables),
            "synchronized_batch_norm": self.statistics,
        }


def _variable_dict(row):
    data = dataclasses.asdict(row)
    data["shape"] = None if row.shape is None else list(row.shape)
    data["placement"] = list(row.placement)
    data["shard_sizes"] = list(row.shard_sizes)
    data["shards"] = [dataclasses.asdict(s) for s in row.shards]
    return data


def _shard_extents(partition, var):
    """Extents along the split axis (None if the shape is unknown) and bytes of each shard."""
    axis, k = partition.axis, partition.count
    if var is None or not var.shape_known or axis >= len(var.shape) or var.shape[axis] < 1:
        share = (var.byte_size if var is not None else 0) // k
        return partition.shard_sizes or None, (share,) * k
    sizes = partition.sizes(var.shape[axis])
    row_bytes = var.byte_size // var.shape[axis]
    return sizes, tuple(s * row_bytes for s in sizes)


def pieces(entry, var):
    """``(name, synchronizer entry, bytes)`` per synchronized piece of a variable entry."""
    if entry.partition is None:
        return [(entry.var_name, entry.synchronizer, var.byte_size if var is not None else 0)]
    _, nbytes = _shard_extents(entry.partition, var)
    parts = entry.parts or (entry,) * len(nbytes)
    return [(part.var_name, part.synchronizer, b) for part, b in zip(parts, nbytes)]


def _placement_of(sync):
    if sync is None:
        return None
    return sync.destination if sync.kind == "ps" else sync.group


def _variable_row(entry, var):
    sync = entry.synchronizer
    synced = pieces(entry, var)
    partition = entry.partition
    sizes = _shard_extents(partition, var)[0] if partition is not None else None
    return VariableRow(
        name=entry.var_name, shape=None if var is None else var.shape,
        dtype="?" if var is None else var.dtype, bytes=0 if var is None else var.byte_size,
        sparse=bool(var is not None and var.is_sparse),
        synchronizer=_SYNCHRONIZER_NAMES[sync.kind] if sync is not None else "none",
        placement=tuple(_placement_of(part) for _, part, _ in synced),
        partitioner=partition.partitioner if partition is not None else "", shard_sizes=tuple(sizes or ()),
        compressor=sync.compressor.name if sync is not None and sync.kind == "ar" else "-",
        shards=tuple(ShardRow(name, _placement_of(part), b) for name, part, b in synced))


def _loads(entries, by_name, resource_spec):
    loads = {name: 0 for name, _ in resource_spec.cpu_devices}
    for entry in entries.variables.values():
        for _, part, nbytes in pieces(entry, by_name.get(entry.var_name)):
            if part is not None and part.kind == "ps":
                loads[part.destination] = loads.get(part.destination, 0) + nbytes
    return loads


def _gradient_bytes(var, nbytes):
    """The bytes the gradient of a piece of ``nbytes`` moves: fewer when it is computed in half precision."""
    if var is None or not var.byte_size or var.grad_dtype in (None, var.dtype):
        return nbytes
    return nbytes * var.grad_byte_size // var.byte_size


def load_imbalance(loads):
    """max / mean of ``loads``; 1.0 when nothing is loaded."""
    values = list(loads.values()) if isinstance(loads, dict) else list(loads)
    total = sum(values)
    return 1.0 if total <= 0 else max(values) * len(values) / total


class _Traffic:
    """Per-device byte counters, filled piece by piece."""

    def __init__(self, replicas):
        self.replicas = replicas
        self.held, self.sent, self.received = {}, {}, {}
        self.per_replica_push = 0    # pushed by every replica (its gradients)
        self.per_replica_pull = 0    # pulled by every replica (the new values)
        self.per_replica_ar = 0      # all-reduced by every replica
        self.per_replica_copies = 0  # mirrored on every replica
        self.per_replica_statistics = 0   # synchronized batch norm, relayed through the chief (sent and received)
        self.proxies = {}            # first replica of a node -> bytes of the proxies it holds
        self.firsts = {}             # node -> its first replica
        for replica in replicas:
            self.firsts.setdefault(node_of(replica), replica)

    def add(self, device, held=0, sent=0, received=0):
        self.held[device] = self.held.get(device, 0) + held
        self.sent[device] = self.sent.get(device, 0) + sent
        self.received[device] = self.received.get(device, 0) + received

    def piece(self, sync, nbytes, grad_bytes):
        """A synchronized piece of ``nbytes`` whose gradient moves ``grad_bytes`` (fewer in half precision)."""
        n = len(self.replicas)
        if sync is None:
            return
        if sync.kind == "ps":
            server_sends = ps_push_pull_bytes(nbytes, n)[2]
            server_receives = ps_push_pull_bytes(grad_bytes, n)[3]
            self.add(sync.destination, nbytes, server_sends, server_receives)
            self.per_replica_push += grad_bytes
            self.per_replica_pull += nbytes
            if sync.proxy:
                for first in self.firsts.values():
                    if keeps_proxy(first, sync.destination):
                        self.proxies[first] = self.proxies.get(first, 0) + nbytes
        else:
            self.per_replica_ar += grad_bytes
            self.per_replica_copies += nbytes

    def statistics(self, nbytes, relayed):
        """Synchronized batch norm's ``nbytes`` per replica: through the chief, or all-reduced."""
        if relayed:
            self.per_replica_statistics += nbytes
        else:
            self.per_replica_ar += nbytes

    def finish(self):
        n = len(self.replicas)
        ring = (2 * (n - 1) * self.per_replica_ar + n // 2) // n if n else 0   # rounded 2(N-1)/N*M
        relayed = self.per_replica_statistics
        for replica in self.replicas:
            self.add(replica, self.per_replica_copies + self.proxies.get(replica, 0),
                     self.per_replica_push + ring + relayed, self.per_replica_pull + ring + relayed)


def plan_report(strategy, variables, resource_spec, builder=None, statistics=None):
    """The :class:`PlanReport` of ``strategy`` for the planned ``variables`` on a cluster; ``statistics``: the
    graph's synchronized batch norm (``inputs.BatchStatistics``; None: none)."""
    entries = read_entries(strategy)
    by_name = {v.name: v for v in variables}
    replicas = entries.replicas
    traffic = _Traffic(replicas)
    statistics = statistics or BatchStatistics()
    relayed = relays_statistics(entries.variables.values(), replicas)
    if statistics.exchanges:
        traffic.statistics(statistics.bytes, relayed)
    rows = []
    for entry in entries.variables.values():
        var = by_name.get(entry.var_name)
        rows.append(_variable_row(entry, var))
        for _, part, nbytes in pieces(entry, var):
            traffic.piece(part, nbytes, _gradient_bytes(var, nbytes))
    traffic.finish()
    listed = {entry.var_name for entry in entries.variables.values()}
    for var in variables:   # variables the strategy leaves alone
        if var.name not in listed:
            rows.append(VariableRow(var.name, var.shape, var.dtype, var.byte_size, var.is_sparse,
                                    "none", (), "", (), "-", ()))
    loads = _loads(entries, by_name, resource_spec)
    has_ps = any(r.synchronizer == "PS" for r in rows)
    servers = {d for r in rows if r.synchronizer == "PS" for d in r.placement}
    devices = _device_rows(traffic, resource_spec, set(replicas), servers)
    return PlanReport(strategy_id=strategy.id, builder=builder if builder is not None else "",
                      replicas=replicas, variables=tuple(rows), devices=devices,
                      imbalance=round(load_imbalance(loads), 6) if has_ps else 1.0,
                      num_servers=len(loads) if has_ps else 0,
                      statistics={"exchanges": statistics.exchanges, "bytes": statistics.bytes, "relayed": relayed}
                      if statistics.exchanges else None)


def _device_rows(traffic, resource_spec, replicas, servers):
    known = [name for name, _ in resource_spec.devices]
    order = [d for d in known if d in traffic.held] + sorted(set(traffic.held) - set(known))
    return tuple(DeviceRow(d, tuple(r for r, s in (("replica", replicas), ("server", servers))
                                    if d in s),
                           traffic.held[d], traffic.sent[d], traffic.received[d]) for d in order)


def human_bytes(n):
    """``1536 -> '1.5 KiB'``."""
    if abs(n) < 1024:
        return "{:d} B".format(int(n))
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return "{:.1f} {}".format(value, unit)


def exact_bytes(n):
    """``16 MiB``, ``512 KiB``, ``1000 B``: a size in the largest unit that divides it (a setting such as a bucket
    size, shown as given; ``human_bytes`` rounds a measured amount)."""
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return "{} {}".format(n // unit, name)
    return "{} B".format(n)


def _shape_text(shape):
    if shape is None:
        return "<unknown>"
    return "[{}]".format(", ".join("?" if d is None else str(d) for d in shape))


def _groups_text(groups):
    """``(0, 0, 1, 2) -> 'group 0-2'``."""
    values = sorted(set(groups))
    if len(values) == 1:
        return "group {}".format(values[0])
    if values == list(range(values[0], values[-1] + 1)):
        return "groups {}-{}".format(values[0], values[-1])
    return "groups " + ",".join(str(g) for g in values)


def _placement_text(row):
    if not row.placement:
        return "-"
    if row.synchronizer == "AllReduce":
        return _groups_text(row.placement)
    return ", ".join(row.placement)


def _partition_text(row):
    if not row.partitioner:
        return "-"
    if not row.shard_sizes:
        return row.partitioner
    return "{} ({})".format(row.partitioner, "/".join(str(s) for s in row.shard_sizes))


def _columns(header, rows):
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
            for line in [header] + rows]


def format_table(report):
    """The human-readable plan: header, one row per variable, device totals, λ."""
    lines = ["strategy {}{}".format(report.strategy_id,
                                    "  built by " + report.builder if report.builder else ""),
             "replicas ({}): {}".format(len(report.replicas), ", ".join(report.replicas)), ""]
    header = ("variable", "shape", "dtype", "bytes", "kind", "synchronizer", "server/group",
              "partitions", "compressor")
    lines += _columns(header, [(v.name, _shape_text(v.shape), v.dtype, human_bytes(v.bytes),
                                "sparse" if v.sparse else "dense", v.synchronizer,
                                _placement_text(v), _partition_text(v), v.compressor)
                               for v in report.variables])
    lines.append("")
    lines += _columns(("device", "role", "held", "sent/step", "received/step"),
                      [(d.device, "+".join(d.roles) or "-", human_bytes(d.held_bytes),
                        human_bytes(d.sent_bytes), human_bytes(d.received_bytes))
                       for d in report.devices])
    lines.append("")
    if report.statistics:
        lines.append("synchronized batch norm: {} exchanges per step (forward and backward), {} per replica{}".format(
            report.statistics["exchanges"], human_bytes(report.statistics["bytes"]),
            ", relayed through the chief" if report.statistics["relayed"] else ", all-reduced"))
    total = sum(v.bytes for v in report.variables)
    if report.num_servers:
        balance = "imbalance λ = {:.3f} (max / mean bytes over {} candidate servers)".format(
            report.imbalance, report.num_servers)
    else:
        balance = "imbalance λ = 1.000 (no parameter servers: every replica holds the same bytes)"
    lines.append("{} variables, {}; {}".format(len(report.variables), human_bytes(total), balance))
    return "\n".join(lines)
