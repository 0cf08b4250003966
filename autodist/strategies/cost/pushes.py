"""Fused parameter-server pushes as the cost model prices them (``contract.fused_pushes``, the kernel's rule).

A small dense gradient bound for a synchronous server travels in one packed
push with the others bound for that server (``kernel/synchronization/ps.py``):
its bytes cross the link as before, but it sends no message of its own; each
bucket costs one message per node (``traffic.fused_messages``). A whole plan
is priced with the kernel's buckets (``traffic.plan_fused_pushes``); the
search, which moves one variable at a time, counts every fusable piece and
``fused_buckets`` of their bytes per server.
"""
import math

from autodist.plan.contract import FUSED_BUCKET_BYTES, FUSED_PUSH_BYTES
from autodist.strategies.inputs import node_of

__all__ = ["fusable", "fused_buckets", "FusedPushes"]


def fusable(sync, var, nbytes):
    """Whether a piece of ``nbytes`` pushed under ``sync`` may ride in a fused push (``contract.fused_pushes``):
    a dense gradient of known size bound for a synchronous server, staleness 0, small enough."""
    return (sync is not None and sync.kind == "ps" and sync.sync and not sync.staleness
            and not (var is not None and var.is_sparse) and (var is None or var.shape_known)
            and nbytes <= FUSED_PUSH_BYTES)


def fused_buckets(nbytes, count):
    """The fused pushes ``count`` pieces of ``nbytes`` in all take to one server: none for none, else one per
    ``FUSED_BUCKET_BYTES`` begun (a bucket of one piece is that piece's own push: one message all the same)."""
    return 0 if count <= 0 else max(1, math.ceil(nbytes / FUSED_BUCKET_BYTES - 1e-9))


class FusedPushes:
    """Which pushed pieces ride in fused pushes, and what each (server node, dtype) holds: ``[bytes, pieces]``.

    ``names``: the plan's fused pieces by name (``contract.fused_pushes``, as the kernel packs them);
    None: every ``fusable`` piece (the search's view, where buckets are ``fused_buckets`` of the bytes).
    """

    def __init__(self, names=None):
        self.names = names
        self.slots = {}

    def joins(self, name, sync, var, nbytes):
        return fusable(sync, var, nbytes) and (self.names is None or name in self.names)

    def slot(self, sync, var):
        return node_of(sync.destination), (var.grad_dtype or var.dtype) if var is not None else ""

    def add(self, sync, var, nbytes, scale):
        held = self.slots.setdefault(self.slot(sync, var), [0.0, 0])
        held[0] += scale * nbytes
        held[1] += scale

    def buckets(self, slot):
        return fused_buckets(*self.slots.get(slot, (0.0, 0)))
