"""The strategy -> kernel contract: the Strategy protobuf as typed per-variable entries.

Builders describe each variable as an entry, which :func:`write_entry` writes
into the Strategy (``plan.strategy.assemble`` calls it); the kernel, the plan
report and everything else read it through :func:`read_entries`, which parses
and validates the protobuf once. Outside this module nobody interprets a
node's fields::

    Strategy.Node                                   VariableEntry
      var_name: "emb:0"                               var_name "emb:0", op_name "emb"
      PSSynchronizer {reduction_destination: d0,      synchronizer PSEntry(d0, sync=True)
                      sync: true}
      partitioner: "2,1"                              partition Partition(rank 2, axis 0, count 2,
      shard_sizes: []                                   shard_sizes (), shard_names (emb/part_0, emb/part_1))
      part_config: [{var_name: "emb/part_0:0", ...},  parts (VariableEntry("emb/part_0:0", ...),
                    {var_name: "emb/part_1:0", ...}]         VariableEntry("emb/part_1:0", ...))

The rules, kept here only (AutoDist 0.7 compatible):

- ``partitioner`` holds a shard count per axis, each at least 1, at most one
  of them above 1. An empty string or all ones splits nothing.
- ``part_config`` lists the shards in order, named by ``names.shard_name``.
  It may be empty: the plan report then counts every shard with the
  variable's synchronizer, but the kernel needs the list (it synchronizes
  shards, and a shard without an entry has no synchronizer).
- ``shard_sizes`` are the extents along the split axis; empty means the
  even split (:func:`even_sizes`), where the first ``dim % k`` shards hold one
  extra row.
- ``AllReduceSynchronizer.powersgd_rank`` 0 means :data:`DEFAULT_POWERSGD_RANK`.

Errors are ``StrategyError`` naming the variable. The module does not import
TensorFlow.
"""
import dataclasses
import enum
import functools
from typing import Dict, Optional, Tuple, Union

from autodist.errors import StrategyError
from autodist.plan.names import shard_name

__all__ = [
    "Compressor", "CollectiveSpec", "DEFAULT_POWERSGD_RANK", "PSEntry", "AllReduceEntry", "Partition",
    "VariableEntry", "StrategyEntries", "read_entries", "parse_partitioner", "even_sizes", "variable_entry",
    "write_entry", "op_name", "map_destinations", "with_destinations", "GATHER_BYTES", "gathers",
    "FUSED_PUSH_BYTES", "FUSED_BUCKET_BYTES", "fused_pushes",
]


class Compressor(enum.IntEnum):
    """Gradient compressors of all-reduce, by AutoDist's names; values are the protobuf's numbers."""

    NoneCompressor = 0
    HorovodCompressor = 1
    HorovodCompressorEF = 2
    PowerSGDCompressor = 3


class CollectiveSpec(enum.IntEnum):
    """How collectives run: AUTO lets the runtime choose; values are the protobuf's numbers."""

    AUTO = 0
    NCCL = 1
    RING = 2


DEFAULT_POWERSGD_RANK = 1
#: An uncompressed fused all-reduce bucket whose gather brings each replica at most this many
#: bytes, (N - 1) x the bucket, is all-gathered and added by every replica instead of ring
#: all-reduced (CPU replicas only): a gather waits for N - 1 sequential messages where the ring
#: waits for 2 (N - 1), and a small bucket's step is those waits (tiny model, two loopback nodes:
#: 0.64 -> 0.55 ms per step). Past tens of KiB the bytes and the adds dominate (cnn's 2 MB
#: bucket: 14.1 -> 18.2 ms by gather).
GATHER_BYTES = 64 * 1024


def gathers(nbytes, replicas):
    """Whether an uncompressed bucket of ``nbytes`` (None: unknown) is all-gathered rather than ring
    all-reduced over ``replicas`` (every replica's device name, job-wide, so every node decides the
    same): only when no replica is a GPU (measured on CPUs over gRPC; NCCL's small all-reduce is
    already quick) and (N - 1) x ``nbytes`` is at most ``GATHER_BYTES``."""
    count = len(replicas)
    return (nbytes is not None and count > 1 and (count - 1) * nbytes <= GATHER_BYTES
            # both name forms hold ":GPU:" before a GPU's index: "/job:w/task:0/device:GPU:0", "10.0.0.1:GPU:0"
            and not any(":GPU:" in name.upper() for name in replicas))


#: A dense gradient of at most this many bytes pushed to a synchronous parameter server rides in a
#: fused push: the node packs the small gradients bound for one server into one vector, the server
#: takes one accumulator's sum and splits it (``kernel/synchronization/ps.py``). A push is a message
#: and an accumulator's round in every step; ResNet-101's 312 convolution and batch-norm variables,
#: most of them a few KiB, cost 312 of each per server without it, as Horovod's tensor fusion found
#: for all-reduce. Past 64 KiB a piece's bytes outweigh its message.
FUSED_PUSH_BYTES = 64 * 1024
#: Bytes of one fused push at most (a full bucket is closed, the next one starts).
FUSED_BUCKET_BYTES = 4 << 20


def fused_pushes(pieces):
    """``{key: bucket}`` of the pieces pushed in fused buckets, for ``pieces`` = ``[(key, destination, dtype
    name, bytes, fusable)]`` in plan order (``fusable``: a dense gradient pushed to a synchronous server,
    staleness 0). A bucket holds runs of fusable pieces of at most ``FUSED_PUSH_BYTES`` bound for one
    destination in one dtype, closed at ``FUSED_BUCKET_BYTES``; buckets are numbered in the order their
    first piece comes, and a bucket of one piece is no bucket (it is pushed alone). Every node computes
    the same buckets from the same plan."""
    open_buckets, members, count = {}, {}, 0
    for key, destination, dtype, nbytes, fusable in pieces:
        if not fusable or nbytes > FUSED_PUSH_BYTES:
            continue
        slot = (destination, dtype)
        bucket = open_buckets.get(slot)
        if bucket is None or bucket[1] + nbytes > FUSED_BUCKET_BYTES:
            bucket = open_buckets[slot] = [count, 0]
            count += 1
        bucket[1] += nbytes
        members.setdefault(bucket[0], []).append(key)
    found, number = {}, 0
    for bucket in sorted(members):
        if len(members[bucket]) > 1:
            found.update((key, number) for key in members[bucket])
            number += 1
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class PSEntry:
    """Synchronize through the parameter server ``destination`` (a device name)."""

    destination: str
    sync: bool = False
    staleness: int = 0
    proxy: bool = False        # PSSynchronizer.local_replication: a node-local copy, refreshed every step
    kind = "ps"


@dataclasses.dataclass(frozen=True, slots=True)
class AllReduceEntry:
    """Synchronize by collective all-reduce; entries of one ``group`` are fused."""

    group: int = 0
    compressor: Compressor = Compressor.NoneCompressor
    powersgd_rank: int = DEFAULT_POWERSGD_RANK
    spec: CollectiveSpec = CollectiveSpec.AUTO
    kind = "ar"


Synchronizer = Union[PSEntry, AllReduceEntry]


def even_sizes(dim, count):
    """Extents of ``count`` even shards of ``dim`` rows: the first ``dim % count`` get one more."""
    base, extra = divmod(dim, count)
    return (base + 1,) * extra + (base,) * (count - extra)


@dataclasses.dataclass(frozen=True, slots=True)
class Partition:
    """A variable of ``rank`` dimensions split along ``axis`` into ``count`` shards."""

    rank: int
    axis: int
    count: int
    shard_sizes: Tuple[int, ...]   # extents along ``axis``; () = the even split
    shard_names: Tuple[str, ...]   # op names of the shards, in order along ``axis``

    @classmethod
    def of(cls, var_op, rank, axis, count, shard_sizes=()):
        """The partition of ``var_op``, its shards named as the graph will name them."""
        if not 0 <= axis < rank or count < 2 or (shard_sizes and len(shard_sizes) != count):
            raise StrategyError("variable '{}': cannot split axis {} of {} into {} shards of sizes {}".format(
                var_op, axis, rank, count, list(shard_sizes)))
        return cls(rank, axis, count, tuple(shard_sizes), tuple(shard_name(var_op, i) for i in range(count)))

    @property
    def shard_var_names(self):
        """The shards' tensor names, as ``part_config`` lists them: ``("emb/part_0:0", ...)``."""
        return tuple(name + ":0" for name in self.shard_names)

    @property
    def partitioner(self):
        """The ``Node.partitioner`` string: ``"4,1"`` for 4 shards along axis 0 of a matrix."""
        return ",".join(str(self.count) if i == self.axis else "1" for i in range(self.rank))

    def sizes(self, dim):
        """Extents of the shards of a split dimension of ``dim`` rows."""
        return self.shard_sizes or even_sizes(dim, self.count)


@dataclasses.dataclass(frozen=True, slots=True)
class VariableEntry:
    """One variable of a strategy; ``parts`` are its shards' entries when it is partitioned."""

    var_name: str                          # tensor name, "emb:0"
    op_name: str                           # "emb"
    synchronizer: Optional[Synchronizer]   # None: the strategy leaves the variable alone
    partition: Optional[Partition] = None
    parts: Tuple["VariableEntry", ...] = ()


@dataclasses.dataclass(frozen=True)
class StrategyEntries:
    """A Strategy read: its variables by op name (in the strategy's order) and its replica devices."""

    variables: Dict[str, VariableEntry]
    replicas: Tuple[str, ...]
    accumulation_steps: int = 1   # micro-steps per synchronized update

    @functools.cached_property
    def partitions(self):
        """{variable op name: Partition} of the variables the strategy splits."""
        return {name: e.partition for name, e in self.variables.items() if e.partition is not None}

    @functools.cached_property
    def synchronized(self):
        """{op name: entry} of what gets synchronized: shards where the strategy lists them, else variables."""
        pieces = {}
        for entry in self.variables.values():
            for piece in entry.parts or (entry,):
                pieces[piece.op_name] = piece
        return pieces


def parse_partitioner(text):
    """``"1,4" -> (2, 1, 4)``: rank, split axis and shard count; None when ``text`` splits nothing.

    StrategyError (a ValueError) when ``text`` is not shard counts per axis
    with at most one count above 1.
    """
    if not text:
        return None
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise StrategyError("partitioner {!r} is not a list of shard counts per axis, e.g. '4,1'"
                            .format(text)) from None
    split = [i for i, c in enumerate(counts) if c != 1]
    if len(split) > 1 or any(c < 1 for c in counts):
        raise StrategyError("partitioner {!r} must split exactly one axis into 2 or more shards".format(text))
    if not split:
        return None
    return len(counts), split[0], counts[split[0]]


def read_entries(strategy):
    """The :class:`StrategyEntries` of a Strategy (the wrapper or the protobuf message)."""
    variables = {}
    for node in strategy.node_config:
        entry = _read_node(node)
        if entry.op_name in variables:
            raise StrategyError("variable '{}' has two entries in the strategy".format(entry.op_name))
        variables[entry.op_name] = entry
    steps = strategy.graph_config.accumulation_steps
    if steps < 0:
        raise StrategyError("graph_config.accumulation_steps must be 0 or more, got {}".format(steps))
    return StrategyEntries(variables=variables, replicas=tuple(strategy.graph_config.replicas),
                           accumulation_steps=max(1, steps))


def op_name(var_name):
    """``op_name("emb:0") == "emb"``: a node's variable op, from its ``var_name`` (a tensor name)."""
    return var_name.split(":")[0]


def _problem(var_op, text):
    return StrategyError("variable '{}': {}".format(var_op, text))


def _read_node(node):
    var_op = op_name(node.var_name)
    try:
        parsed = parse_partitioner(node.partitioner)
    except StrategyError as e:
        raise _problem(var_op, str(e)) from None
    partition = None
    if parsed is not None:
        rank, axis, count = parsed
        if node.shard_sizes and len(node.shard_sizes) != count:
            raise _problem(var_op, "has {} shard_sizes for {} shards".format(len(node.shard_sizes), count))
        partition = Partition(rank, axis, count, tuple(node.shard_sizes),
                              tuple(shard_name(var_op, i) for i in range(count)))
    elif node.shard_sizes or node.part_config:
        raise _problem(var_op, "has shard_sizes or part_config, but partitioner {!r} splits nothing"
                       .format(node.partitioner))
    parts = tuple(_read_part(var_op, part) for part in node.part_config)
    expected = list(partition.shard_var_names) if parts else []
    if [p.var_name for p in parts] != expected:
        raise _problem(var_op, "part_config names {} should be {}".format([p.var_name for p in parts], expected))
    return VariableEntry(node.var_name, var_op, _read_synchronizer(var_op, node), partition, parts)


def _read_part(var_op, part):
    if part.partitioner or part.part_config:
        raise _problem(var_op, "shard '{}' is partitioned again; shards cannot be split".format(part.var_name))
    return VariableEntry(part.var_name, op_name(part.var_name), _read_synchronizer(var_op, part))


def _read_synchronizer(var_op, node):
    kind = node.WhichOneof("synchronizer")
    if kind == "PSSynchronizer":
        ps = node.PSSynchronizer
        return PSEntry(ps.reduction_destination, ps.sync, ps.staleness, ps.local_replication)
    if kind == "AllReduceSynchronizer":
        ar = node.AllReduceSynchronizer
        try:
            compressor, spec = Compressor(ar.compressor), CollectiveSpec(ar.spec)
        except ValueError as e:
            raise _problem(var_op, "AllReduceSynchronizer: {}".format(e)) from None
        return AllReduceEntry(ar.group, compressor, ar.powersgd_rank or DEFAULT_POWERSGD_RANK, spec)
    return None


def variable_entry(var_name, var_op, synchronizers, partition=None):
    """The entry of a variable: whole, synchronized by ``synchronizers[0]``; or split by
    ``partition``, shard ``i`` synchronized by ``synchronizers[i]`` (the variable by the first's)."""
    if partition is None:
        return VariableEntry(var_name, var_op, synchronizers[0])
    if len(synchronizers) != partition.count:
        raise StrategyError("variable '{}': {} synchronizers for {} shards".format(
            var_op, len(synchronizers), partition.count))
    parts = tuple(VariableEntry(var_name, op_name(var_name), sync)
                  for var_name, sync in zip(partition.shard_var_names, synchronizers))
    return VariableEntry(var_name, var_op, synchronizers[0], partition, parts)


def write_entry(node, entry):
    """Fill the empty ``Strategy.Node`` ``node`` from ``entry``."""
    node.var_name = entry.var_name
    _write_synchronizer(node, entry.synchronizer)
    if entry.partition is None:
        return
    node.partitioner = entry.partition.partitioner
    node.shard_sizes.extend(entry.partition.shard_sizes)
    for part in entry.parts:
        write_entry(node.part_config.add(), part)


def _write_synchronizer(node, sync):
    # Proto3 leaves fields at their default out of the bytes (and so out of the strategy id); the
    # rank's default is spelled 0 on the wire, 1 in the entry.
    if sync is None:
        return
    if sync.kind == "ps":
        ps = node.PSSynchronizer
        ps.SetInParent()
        ps.reduction_destination = sync.destination
        ps.local_replication, ps.sync, ps.staleness = sync.proxy, sync.sync, sync.staleness
        return
    ar = node.AllReduceSynchronizer
    ar.SetInParent()   # all-default settings must still select the oneof
    ar.spec, ar.compressor, ar.group = int(sync.spec), int(sync.compressor), sync.group
    if sync.powersgd_rank != DEFAULT_POWERSGD_RANK:
        ar.powersgd_rank = sync.powersgd_rank


def map_destinations(node, resolve):
    """Replace the parameter-server destinations of ``node`` and its shards, in place, by
    ``resolve(destination, var_name)`` (the compiler's device resolution)."""
    if node.WhichOneof("synchronizer") == "PSSynchronizer":
        node.PSSynchronizer.reduction_destination = resolve(node.PSSynchronizer.reduction_destination, node.var_name)
    for part in node.part_config:
        map_destinations(part, resolve)


def with_destinations(node, resolve):
    """A copy of ``node`` whose parameter-server destinations are mapped as :func:`map_destinations` maps them."""
    copy = type(node)()
    copy.CopyFrom(node)
    map_destinations(copy, resolve)
    return copy
