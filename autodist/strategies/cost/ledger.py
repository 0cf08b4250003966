"""The ledger of one training step's traffic: bytes and messages per link, per-node totals, servers' work.

``cost.traffic`` fills it from a plan (what each synchronizer moves); the
model (``cost.model``) reads a node's totals from it; AutoStrategy's search
adds and takes back one variable's traffic, or a whole block's (``merge``).
"""
import dataclasses
from typing import Dict, Tuple

__all__ = ["RPC", "COLLECTIVE", "Link", "StepTraffic"]

RPC = "rpc"
COLLECTIVE = "collective"


@dataclasses.dataclass
class Link:
    """What crosses one link in one step."""

    bytes: float = 0.0
    messages: int = 0


class StepTraffic:
    """Per-step traffic of a plan: ``links[(transport, src, dst)]`` and the servers' work.

    Per-node totals are kept as links are added, so a search can add and take
    back a variable's traffic and read a node's totals in constant time.
    """

    def __init__(self):
        self.links: Dict[Tuple[str, str, str], Link] = {}
        self.server_bytes: Dict[str, float] = {}     # node -> dense bytes its servers aggregate
        self.sparse_server_bytes: Dict[str, float] = {}   # node -> sparse rows' bytes its servers merge
        self.sparse_apply_bytes: Dict[str, float] = {}    # node -> other replicas' rows its replicas apply
        self.sparse_gathers: Dict[str, int] = {}   # node -> sparse all-reduces it joins (``gathers_sparse``)
        self.waits: Dict[Tuple[str, str], int] = {}   # (reader, server node) -> pieces R waits on S for
        self._sent, self._received, self._local, self._local_rings = {}, {}, {}, {}
        self._pulled = {}   # (node, 0: sent / 1: received) -> bytes of pulls (``pulled``)
        #: ``(bytes, replicas)`` of the fused all-reduce whose gradients backprop makes last (its group holds
        #: the model's first variables): nothing hides it (``model.exposed_comm_s``); None: no such group
        self.last_bucket = None
        #: the chief's node when the kernel relays the plan's all-reduced gradients through it (``traffic.relayed``:
        #: parameter servers and all-reduce over several nodes); None: collectives, or no all-reduce
        self.relay_hub = None

    def add(self, transport, src, dst, nbytes, messages=1, pull=False):
        """``pull``: bytes a node reads from a server before its compute (a variable, a proxy, a relayed mean),
        which cannot overlap the pushes after it (``pulled``)."""
        # the search calls this millions of times: no object is made for a link or total that exists
        if pull and src != dst:
            self._pulled[(src, 0)] = self._pulled.get((src, 0), 0.0) + nbytes
            self._pulled[(dst, 1)] = self._pulled.get((dst, 1), 0.0) + nbytes
        key = (transport, src, dst)
        link = self.links.get(key)
        if link is None:
            link = self.links[key] = Link()
        link.bytes += nbytes
        link.messages += messages
        if src == dst:   # a ring's hop between two replicas of a node is TensorFlow's collective, not a copy
            local = self._local_rings if transport == COLLECTIVE else self._local
            local[src] = local.get(src, 0.0) + nbytes
            return
        for totals, node in ((self._sent, src), (self._received, dst)):
            total = totals.get((node, transport))
            if total is None:
                total = totals[(node, transport)] = [0.0, 0]
            total[0] += nbytes
            total[1] += messages

    def merge(self, other, scale=1):
        """Add (``scale=-1``: take back) everything ``other`` holds: a block of variables priced once."""
        for key, link in other.links.items():
            mine = self.links.get(key)
            if mine is None:
                mine = self.links[key] = Link()
            mine.bytes += scale * link.bytes
            mine.messages += scale * link.messages
        for name in ("server_bytes", "sparse_server_bytes", "sparse_apply_bytes", "sparse_gathers", "waits", "_local",
                     "_local_rings", "_pulled"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + scale * value
        for mine, theirs in ((self._sent, other._sent), (self._received, other._received)):
            for key, (nbytes, messages) in theirs.items():
                total = mine.setdefault(key, [0.0, 0])
                total[0] += scale * nbytes
                total[1] += scale * messages

    def sent(self, node, transport):
        """``(bytes, messages)`` ``node`` sends to other nodes over ``transport``."""
        return tuple(self._sent.get((node, transport), (0.0, 0)))

    def received(self, node, transport):
        return tuple(self._received.get((node, transport), (0.0, 0)))

    def pulled(self, node):
        """``(bytes sent, bytes received)`` of ``node``'s RPC traffic that are pulls. A synchronous step pulls
        before its compute and pushes after it: a node's link carries the two one after the other, each
        both ways at once (a PS node on two nodes pulls M, then pushes M: 2 M; with the variables spread
        over both, each link carries M/2 each way in each phase: M)."""
        return self._pulled.get((node, 0), 0.0), self._pulled.get((node, 1), 0.0)

    def local_bytes(self, node):
        """Bytes copied inside ``node`` (a replica and a server, or two replicas, of one node)."""
        return self._local.get(node, 0.0)

    def local_ring_bytes(self, node):
        """Bytes a ring moves between two replicas of ``node`` (the collective executor, in process)."""
        return self._local_rings.get(node, 0.0)

    def exchanges(self):
        """The transports whose protocol exchanges with another node in one step: ``RPC`` (a synchronous
        parameter server's pull, push, take and release token, ``kernel/synchronization/ps.py``) and
        ``COLLECTIVE`` (a ring), in that order."""
        return tuple(t for t in (RPC, COLLECTIVE)
                     if any(total[0] > 0 for (_, transport), total in self._sent.items() if transport == t))

    def gathers_sparse(self):
        """Whether some node joins a sparse all-reduce (``sparse_gathers``): the step waits for its chain of
        gathers (``model.fixed_step_s``)."""
        return any(count > 0 for count in self.sparse_gathers.values())

    def waiting(self):
        """Whether some node's reads wait for another node's compute (``waits``, module docstring)."""
        return any(count > 0 for count in self.waits.values())

    def nodes(self):
        found = {s for _, s, _ in self.links} | {d for _, _, d in self.links} | set(self.server_bytes)
        found |= set(self.sparse_server_bytes) | set(self.sparse_apply_bytes)   # sparse_gathers' nodes are in the latter
        return sorted(found)
