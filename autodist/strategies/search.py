"""AutoStrategy's per-variable search: one variable at a time, each move priced by adding and taking back its traffic.

    end = Search(variables, resource_spec, compute, calibration, start=PSLoadBalancing()).run()   # a Strategy

Each variable in turn, largest first, takes the cheapest of all-reduce (one
fused group), a parameter server on any CPU device with or without a local
proxy (on CPU replicas only: the model prices a proxy by the wait it spares),
or even shards on the ``k`` least loaded servers (``k`` = 2, 4, 8 ... and
every server), the others held fixed; two passes. Only the ``SEARCH_HEAD``
largest variables move one at a time. The rest, the tail (ResNet-101's
smallest batch-norm vectors, most of a 10k-variable graph), is placed once,
after the first pass, as one block: all-reduced, or spread over the least
loaded servers (largest first, with or without proxies), or left as it
started, whichever is cheapest. One at a time, a small variable's move is
priced against servers that still hold the others (their messages stay), so
a tail ends in a mix that costs more; and 10k moves took minutes. A block is
priced whole (``_Tally``: its traffic added once, merged in and taken back),
so the tail costs O(tail x options) per start, the head O(head x options x
nodes) per pass.
"""
import math

from autodist.plan.contract import AllReduceEntry, Partition, PSEntry, read_entries, variable_entry
from autodist.plan.strategy import assemble
from autodist.strategies.cost.model import (beyond_compute_s, exposed_comm_s, fixed_step_s, machine_groups,
                                            node_comm_s, statistics_s, together_s, wait_s)
from autodist.strategies.cost.pushes import FusedPushes
from autodist.strategies.cost.traffic import StepTraffic, add_entry, fused_messages, group_overhead, wire_bytes
from autodist.strategies.inputs import BatchStatistics, all_cpu_servers, replica_devices
from autodist.strategies.report import pieces

__all__ = ["Search", "SEARCH_HEAD", "PASSES"]

PASSES = 2
#: Variables the search moves one at a time (the largest); the others, the tail, move as one block.
SEARCH_HEAD = 256


def _shard_counts(limit):
    """Shard counts tried: powers of two below ``limit``, and ``limit`` (every server)."""
    counts, k = [], 2
    while k < limit:
        counts.append(k)
        k *= 2
    return counts + [limit] if limit >= 2 else counts


class _Tally:
    """The traffic of a set of variable entries and what the search keeps beside it: servers' loads, the one
    all-reduce group (members, bytes, members of unknown size) and the fused pushes, so that a whole block
    can be merged in and taken back."""

    def __init__(self, servers):
        self.traffic = StepTraffic()
        self.loads = {s: 0 for s in servers}
        self.all_reduced = 0           # variables in the one all-reduced group
        self.all_reduced_bytes = 0.0   # its uncompressed bytes: gathered or rung, as the kernel decides
        self.unsized = 0               # its members of unknown shape (the kernel then rings the group)
        self.fused = FusedPushes()     # every fusable push, by server and dtype (their buckets' messages)
        self.server_pieces = 0         # pieces on parameter servers: on several nodes the statistics are relayed

    def group_bytes(self):
        return math.inf if self.unsized else self.all_reduced_bytes

    def add(self, var, entry, scale, replicas, rows):
        group_bytes = {}
        if add_entry(self.traffic, entry, var, replicas, rows, scale, group_bytes, fused=self.fused):
            self.all_reduced += scale
            added = group_bytes.get(0, 0.0)
            if math.isinf(added):
                self.unsized += scale
            else:
                self.all_reduced_bytes += added
        for part in entry.parts or (entry,):
            if part.synchronizer.kind == "ps":
                share = var.byte_size // (entry.partition.count if entry.partition else 1)
                self.loads[part.synchronizer.destination] += scale * share
                self.server_pieces += scale

    def merge(self, other, scale):
        self.traffic.merge(other.traffic, scale)
        for server, load in other.loads.items():
            self.loads[server] += scale * load
        self.all_reduced += scale * other.all_reduced
        self.all_reduced_bytes += scale * other.all_reduced_bytes
        self.unsized += scale * other.unsized
        self.server_pieces += scale * other.server_pieces
        for slot, (nbytes, count) in other.fused.slots.items():
            held = self.fused.slots.setdefault(slot, [0.0, 0])
            held[0] += scale * nbytes
            held[1] += scale * count


class Search:
    """Greedy per-variable search over synchronizers, servers and shard counts (module docstring)."""

    def __init__(self, variables, resource_spec, compute, calibration, start, proxies=True, statistics=None):
        self.variables = variables
        self.statistics = statistics or BatchStatistics()   # synchronized batch norm's exchanges
        self.proxies = (False, True) if proxies else (False,)
        self.replicas = tuple(replica_devices(resource_spec))
        self.nodes = list(resource_spec.nodes)
        self.servers = all_cpu_servers(resource_spec)
        self.compute, self.calibration = compute, calibration
        self.machines = machine_groups(self.nodes, calibration)   # nodes that share a machine's cores
        self.rows = compute.sparse_rows
        self.tally = _Tally(self.servers)
        by_op = read_entries(start.build_from_variables(variables, resource_spec)).variables
        self.entries = [by_op[v.op_name] for v in variables]
        self._apply_all(variables, self.entries, 1)

    @property
    def traffic(self):
        return self.tally.traffic

    @property
    def loads(self):
        return self.tally.loads

    def _fused_slots(self, var, entry):
        """The (server node, dtype) buckets whose pushes ``entry`` joins."""
        fused = self.tally.fused
        return {fused.slot(sync, var) for name, sync, nbytes in pieces(entry, var)
                if sync is not None and fused.joins(name, sync, var, wire_bytes(sync, var, nbytes))}

    def _apply(self, var, entry, scale):
        self._apply_all([var], [entry], scale)

    def _apply_all(self, variables, entries, scale):
        """Add (``scale=-1``: take back) the traffic of ``entries`` of ``variables``."""
        slots = set().union(*(self._fused_slots(var, entry) for var, entry in zip(variables, entries)))
        self._overheads(slots, -1)
        for var, entry in zip(variables, entries):
            self.tally.add(var, entry, scale, self.replicas, self.rows.get(var.name))
        self._overheads(slots, 1)

    def _apply_block(self, block, scale):
        """Add (``scale=-1``: take back) a whole block's ``_Tally``."""
        slots = set(block.fused.slots)
        self._overheads(slots, -1)
        self.tally.merge(block, scale)
        self._overheads(slots, 1)

    def _overheads(self, slots, scale):
        """Add or take back what the one all-reduce group and the fused pushes cost beyond their pieces: it
        changes with what they hold, so a move takes it back before and adds it anew after."""
        tally = self.tally
        if tally.all_reduced:
            group_overhead(self.traffic, self.replicas, 1, tally.group_bytes(), scale)
        for slot in slots:
            fused_messages(self.traffic, self.replicas, slot[0], tally.fused.buckets(slot), scale)

    def cost(self):
        comm = max(max(node_comm_s(self.traffic, n, self.calibration) for n in self.nodes),
                   together_s(self.traffic, self.nodes, self.calibration, self.machines))
        relayed = self.tally.server_pieces > 0 and len(self.nodes) > 1
        return fixed_step_s(self.traffic, self.calibration) + statistics_s(self.statistics, relayed, self.calibration) \
            + beyond_compute_s(wait_s(self.traffic, self.compute),
                               exposed_comm_s(comm, self.compute.step_s, self.calibration.overlap))

    def options(self, var):
        """Entries ``var`` may take: all-reduce, each server (with or without a local proxy), even shards
        on the least loaded servers."""
        found = [variable_entry(var.name, var.op_name, [AllReduceEntry(group=0)])]
        found += [variable_entry(var.name, var.op_name, [PSEntry(s, sync=True, proxy=proxy)])
                  for s in self.servers for proxy in self.proxies]
        if var.is_sparse or not var.shape_known or not var.shape or var.shape[0] < 2:
            return found
        by_load = sorted(self.servers, key=lambda s: (self.loads[s], self.servers.index(s)))
        for k in _shard_counts(min(len(self.servers), var.shape[0])):
            partition = Partition.of(var.op_name, len(var.shape), 0, k)
            found.append(variable_entry(var.name, var.op_name, [PSEntry(s, sync=True) for s in by_load[:k]],
                                        partition))
        return found

    def _best(self, var, current):
        """The cheapest option for ``var``, the others fixed; ``current`` unless one is strictly cheaper."""
        best, best_cost = current, round(self.cost(), 12)
        self._apply(var, current, -1)
        for option in self.options(var):
            self._apply(var, option, 1)
            cost = round(self.cost(), 12)
            self._apply(var, option, -1)
            if cost < best_cost:
                best, best_cost = option, cost
        self._apply(var, best, 1)
        return best

    def run(self):
        order = sorted(range(len(self.variables)), key=lambda i: (-self.variables[i].byte_size, i))
        head, tail = order[:SEARCH_HEAD], order[SEARCH_HEAD:]
        for index in range(PASSES):
            for i in head:
                var = self.variables[i]
                self.entries[i] = self._best(var, self.entries[i])
            if tail and index == 0:
                self._place_tail(tail)
        return self.strategy()

    def _block_options(self, tail):
        """Whole-tail placements: all-reduced in the one group, or spread over the least loaded servers
        (largest first, as PSLoadBalancing does), with local proxies too where they are searched."""
        found = [[variable_entry(self.variables[i].name, self.variables[i].op_name, [AllReduceEntry(group=0)])
                  for i in tail]]
        for proxy in self.proxies:
            loads, entries = dict(self.loads), []
            for i in tail:
                var = self.variables[i]
                server = min(self.servers, key=lambda s: (loads[s], self.servers.index(s)))
                loads[server] += var.byte_size
                entries.append(variable_entry(var.name, var.op_name, [PSEntry(server, sync=True, proxy=proxy)]))
            found.append(entries)
        return found

    def _block(self, tail, entries):
        block = _Tally(self.servers)
        for i, entry in zip(tail, entries):
            block.add(self.variables[i], entry, 1, self.replicas, self.rows.get(self.variables[i].name))
        return block

    def _place_tail(self, tail):
        """The cheapest of the tail's current entries and ``_block_options``, the head fixed."""
        current = [self.entries[i] for i in tail]
        held = self._block(tail, current)
        best, best_cost = current, round(self.cost(), 12)
        self._apply_block(held, -1)
        chosen = held
        for option in self._block_options(tail):
            block = self._block(tail, option)
            self._apply_block(block, 1)
            cost = round(self.cost(), 12)
            self._apply_block(block, -1)
            if cost < best_cost:
                best, best_cost, chosen = option, cost, block
        self._apply_block(chosen, 1)
        for i, entry in zip(tail, best):
            self.entries[i] = entry

    def strategy(self):
        """The current entries as a Strategy."""
        return assemble(self.entries, self.replicas)
