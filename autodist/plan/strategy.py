"""The Strategy (the plan: a protobuf message) and the one function that assembles it.

A strategy says, per variable, how it is synchronized (parameter server or
all-reduce, with their settings) and partitioned, and which devices run
replicas. It is data: builders return it, the compiler maps it to a new one,
files hold it, and every process of a job must hold byte-identical copies.
Hence its id is derived from its content (no clock, no randomness)::

    strategy = PSLoadBalancing().build(graph_item, resource_spec)
    strategy.id                      # 'c0a1...' (16 hex digits of a SHA-256)
    path = strategy.serialize()      # ~/.autodist/strategies/<id>, mode 0600
    same = Strategy.deserialize(strategy.id)

Every new plan is made by :func:`assemble`, from its nodes (the contract's
typed entries, or nodes of another plan copied as they are), its replica
devices and its micro-steps per update; the builders, AutoStrategy's search,
the compiler and a job that accumulates gradients all call it::

    assemble([VariableEntry, ...], replicas)                     a builder's plan
    assemble(kept_nodes, resolved_replicas, steps)               the compiler's
    assemble(strategy.node_config, strategy.graph_config.replicas, 4)   the same plan, accumulating
"""
import hashlib
import os

from google.protobuf import message as _message
from google.protobuf import text_format

from autodist.errors import StrategyError
from autodist.fileio import atomic_write_bytes
from autodist.plan.contract import VariableEntry, write_entry
from autodist.proto import strategy_pb2

__all__ = ["Strategy", "assemble", "DEFAULT_STRATEGY_DIR", "content_id"]

#: Where ``Strategy.serialize()`` writes without a path (``~`` expanded when writing).
DEFAULT_STRATEGY_DIR = os.path.join("~", ".autodist", "strategies")


def content_id(proto):
    """16 hex digits of the SHA-256 of the plan, ignoring the ``id`` and ``path`` fields."""
    if proto.id or proto.path:
        bare = strategy_pb2.Strategy()
        bare.CopyFrom(proto)
        bare.ClearField("id")
        bare.ClearField("path")
        proto = bare
    return hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()[:16]


def _default_path(strategy_id):
    return os.path.join(os.path.expanduser(DEFAULT_STRATEGY_DIR), strategy_id)


class Strategy:
    """A distribution plan: wraps an ``autodist.proto.Strategy`` message.

    ``Strategy(proto)`` wraps the message without copying it. ``id`` is the
    stored id or, while none is stored, the content hash (builders and the
    compiler store it). ``node_config`` and ``graph_config`` are the proto's
    own fields, so they can be edited in place; a stored id does not follow
    such edits (:meth:`with_content_id` recomputes it).
    """

    def __init__(self, strategy=None):
        if strategy is None:
            strategy = strategy_pb2.Strategy()
        elif not isinstance(strategy, strategy_pb2.Strategy):
            raise TypeError("Strategy() wraps an autodist.proto.Strategy message, got {!r}".format(
                type(strategy).__name__))
        self._proto = strategy

    @classmethod
    def with_content_id(cls, proto):
        """Wrap ``proto`` after storing its content hash as its id."""
        proto.id = content_id(proto)
        return cls(proto)

    @property
    def proto(self):
        return self._proto

    @property
    def id(self):
        return self._proto.id or content_id(self._proto)

    @property
    def path(self):
        return self._proto.path

    @property
    def node_config(self):
        return self._proto.node_config

    @property
    def graph_config(self):
        return self._proto.graph_config

    def copy(self):
        """An independent copy (same id and path)."""
        proto = strategy_pb2.Strategy()
        proto.CopyFrom(self._proto)
        return Strategy(proto)

    def serialize(self, path=None):
        """Write the strategy to ``path`` (default ``~/.autodist/strategies/<id>``); returns it.

        The write is atomic and the file is private (mode 0600): it names the
        cluster's devices. The id is stored first and the absolute path is
        recorded in the strategy, so ``self.path`` reads it back.
        """
        self._proto.id = self.id
        if path is None:
            path = _default_path(self._proto.id)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        path = os.path.abspath(os.fspath(path))
        self._proto.path = path
        atomic_write_bytes(path, self._proto.SerializeToString(deterministic=True), mode=0o600)
        return path

    @classmethod
    def deserialize(cls, strategy_id=None, path=None):
        """Read a strategy by id (from the default directory) or from ``path``.

        With both, the file's id must be ``strategy_id``: a worker must never
        run a plan other than the chief's.
        """
        if strategy_id is None and path is None:
            raise StrategyError("Strategy.deserialize needs a strategy_id or a path")
        read_from = os.fspath(path) if path is not None else _default_path(strategy_id)
        with open(read_from, "rb") as handle:
            data = handle.read()
        proto = strategy_pb2.Strategy()
        try:
            proto.ParseFromString(data)
        except _message.DecodeError as exc:
            raise StrategyError("{}: not a serialized autodist Strategy ({})".format(
                read_from, exc)) from None
        if strategy_id is not None and proto.id != strategy_id:
            raise StrategyError("{}: holds strategy {!r}, expected {!r}".format(
                read_from, proto.id, strategy_id))
        return cls(proto)

    @classmethod
    def from_bytes(cls, data, source="a message"):
        """A strategy from its serialized message (``proto.SerializeToString()``; handed over without a file)."""
        proto = strategy_pb2.Strategy()
        try:
            proto.ParseFromString(data)
        except _message.DecodeError as exc:
            raise StrategyError("{}: not a serialized autodist Strategy ({})".format(source, exc)) from None
        return cls(proto)

    def to_bytes(self):
        """The serialized message (what ``from_bytes`` reads)."""
        return self._proto.SerializeToString(deterministic=True)

    def __eq__(self, other):
        return isinstance(other, Strategy) and self._proto == other._proto

    def __hash__(self):
        return hash(self.id)

    def __str__(self):
        """The protobuf text form: one block per node, readable and parseable."""
        return text_format.MessageToString(self._proto)

    def __repr__(self):
        return "<Strategy {}: {} nodes, {} replicas>".format(
            self.id, len(self._proto.node_config), len(self._proto.graph_config.replicas))


def assemble(nodes, replicas, accumulation_steps=1):
    """A new :class:`Strategy` (its content hash stored as its id): ``nodes`` in order, then ``replicas``.

    A node is a ``contract.VariableEntry`` (written by ``contract.write_entry``)
    or a ``Strategy.Node`` of another plan, copied as it is (compiling never
    reformats a plan). ``accumulation_steps``: gradients accumulate over that
    many calls before one synchronized update; 0 and 1 (every call) are both
    left out of the message, so a plan that does not accumulate keeps its id.
    """
    proto = strategy_pb2.Strategy()
    for node in nodes:
        if isinstance(node, VariableEntry):
            write_entry(proto.node_config.add(), node)
        else:
            proto.node_config.add().CopyFrom(node)
    proto.graph_config.replicas.extend(replicas)
    proto.graph_config.accumulation_steps = accumulation_steps if accumulation_steps and accumulation_steps > 1 else 0
    return Strategy.with_content_id(proto)
