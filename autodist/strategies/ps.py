"""Parameter-server builders: ``PS`` and the engine its variants are presets of.

One algorithm serves the whole family; a variant only changes two class
attributes::

    builder               servers              partition
    PS                    first node's CPU:0   -
    PSLoadBalancing       every CPU device     -
    PartitionedPS         every CPU device     even shards along axis 0
    UnevenPartitionedPS   every CPU device     water-filled shards along axis 0

The algorithm: decide each variable's shard count, then place variables
largest shard first (LPT) on the least loaded server(s); a partitioned
variable's shards go to distinct servers, its largest shard to the least
loaded one. Entries are written in the variables' order (the GraphItem's
record order), whatever order placement used. See ``partitioned_ps`` for the
shard-count rule.
"""
from autodist.plan.contract import Partition, PSEntry, even_sizes, variable_entry
from autodist.strategies._arguments import check_bool, check_staleness
from autodist.strategies._placement import LoadBalancer, largest_first
from autodist.strategies._sharding import shard_count, water_fill
from autodist.strategies.base import VariableStrategyBuilder
from autodist.strategies.inputs import first_cpu_server

__all__ = ["PS", "PSConfig", "ps_entry"]


class PSConfig:
    """The synchronizer settings every variable of a PS strategy shares."""

    __slots__ = ("local_replication", "sync", "staleness")

    def __init__(self, builder, local_proxy_variable, sync, staleness):
        self.local_replication = check_bool(builder, "local_proxy_variable", local_proxy_variable)
        self.sync = check_bool(builder, "sync", sync)
        self.staleness = check_staleness(builder, staleness, sync)

    def synchronizer(self, destination):
        return PSEntry(destination, sync=self.sync, staleness=self.staleness, proxy=self.local_replication)


def ps_entry(var, placement, config):
    """``placement = (destinations, partition or None)``: one destination per shard."""
    destinations, partition = placement
    return variable_entry(var.name, var.op_name, [config.synchronizer(d) for d in destinations], partition)


class PS(VariableStrategyBuilder):
    """Every variable on one parameter server: the first node's ``CPU:0``.

    ``local_proxy_variable`` keeps a node-local copy of each variable that is
    refreshed after every update (synchronous ones by the chief, before it
    releases the nodes; on every node but a CPU node that holds the
    variable, which reads it directly); ``sync=False`` makes updates asynchronous;
    ``staleness=s`` (with ``sync=True``) lets a worker run ``s`` steps ahead
    of the slowest.
    """

    #: ``resource_spec -> [server device names]``; presets replace it.
    servers = staticmethod(first_cpu_server)
    #: None, "even" or "uneven" (see ``partitioned_ps``).
    partition = None
    #: Never split below this many bytes per shard (TF's partitioners use 256 KiB too).
    min_shard_bytes = 256 << 10
    #: Shards are sized so greedy placement cannot exceed this imbalance (see ``shard_bytes``).
    target_imbalance = 1.05

    def __init__(self, local_proxy_variable=False, sync=True, staleness=0):
        name = type(self).__name__
        self._config = PSConfig(name, local_proxy_variable, sync, staleness)
        self._args = {"local_proxy_variable": local_proxy_variable, "sync": sync,
                      "staleness": staleness}

    def shard_bytes(self, total_bytes, num_servers):
        """Target shard size: ``(target_imbalance - 1) * mean load``, at least ``min_shard_bytes``.

        Greedy placement guarantees max load <= mean + largest item, so items
        of at most 5% of the mean load bound the imbalance by 1.05.
        """
        mean = total_bytes / num_servers
        return max(self.min_shard_bytes, int((self.target_imbalance - 1.0) * mean))

    def layout(self, variables, resource_spec):
        servers = self.servers(resource_spec)
        if len(servers) == 1:   # nothing to balance or to split
            return [((servers[0],), None)] * len(variables)
        counts = self._shard_counts(variables, len(servers))
        balancer = LoadBalancer(len(servers))
        entries = [None] * len(variables)
        for i in largest_first(_largest_shard_bytes(variables, counts)):
            var, k = variables[i], counts[i]
            if k == 1:
                entries[i] = ((servers[balancer.place(var.byte_size)],), None)
            else:
                entries[i] = self._place_shards(var, k, balancer, servers)
        return entries

    def variable_entry(self, var, placement):
        return ps_entry(var, placement, self._config)

    def _shard_counts(self, variables, num_servers):
        if self.partition is None:
            return [1] * len(variables)
        total = sum(v.byte_size for v in variables)
        size = self.shard_bytes(total, num_servers)
        return [shard_count(v, 0, size, num_servers) for v in variables]

    def _place_shards(self, var, k, balancer, servers):
        taken = balancer.least_loaded(k)
        dim = var.shape[0]
        row_bytes = var.byte_size // dim
        if self.partition == "uneven":
            rows = water_fill(dim, row_bytes, [balancer.loads[s] for s in taken])
        else:
            rows = even_sizes(dim, k)
        for server, count in zip(taken, rows):
            balancer.charge(server, count * row_bytes)
        used = [(servers[s], count) for s, count in zip(taken, rows) if count]
        if len(used) == 1:
            return (used[0][0],), None
        sizes = tuple(c for _, c in used) if self.partition == "uneven" else ()
        return tuple(d for d, _ in used), Partition.of(var.op_name, len(var.shape), 0, len(used), sizes)


def _largest_shard_bytes(variables, counts):
    """The placement key: a variable's largest shard (the whole variable if unsplit)."""
    keys = []
    for var, k in zip(variables, counts):
        if k == 1:
            keys.append(var.byte_size)
        else:
            dim = var.shape[0]
            keys.append(-(-dim // k) * (var.byte_size // dim))
    return keys
