"""Predicted step time of a plan: compute, communication per node, overlap, fixed cost.

    prediction = predict(strategy, variables, compute, calibration)
    prediction.step_s, prediction.comm_share

The step of a synchronous plan is::

    step = compute + fixed + statistics + max(wait, exposed communication)
    wait = compute when a node's reads wait for another node's compute (CPU replicas
           reading variables, or pieces of them, a computing node holds, without a proxy:
           ``StepTraffic.waits``), else 0
    fixed = session step + the protocol's exchange with other nodes: a synchronous parameter
            server's pull, push, take and release token (ps_step_s), a collective's
            round trip (round_trip_s), and with a sparse all-reduce its chain of gathers
            (sparse_gather_s: row counts, then rows, every table's side by side); the longer
            of the two when a plan has both
    communication = max(busiest node, all nodes together)
    busiest node = max over nodes of the node's time on the wire and at work:
        per transport  (max(sent, received) + (1 - duplex) min(sent, received)) / bandwidth
                       (the transport's bandwidth as the node's own link carries it: ``links``;
                       a step's pulls and pushes are two such phases, one after the other)
                       + max(messages sent, messages received) * latency
        + bytes copied inside the node / local bandwidth
        + bytes a ring moves between the node's own replicas / local collective bandwidth
        + dense bytes its parameter servers aggregate / update rate
        + sparse rows' bytes its servers merge / sparse update rate
        + other replicas' sparse rows its replicas apply (sparse all-reduce) / sparse apply rate
    all nodes together = per machine the probe found several nodes on: its nodes' bytes sent to
        other nodes (both transports) / the sum of their collective bandwidths (``together_s``)
    exposed = communication - min(communication, overlap * backward share * compute),
              at least the last fused all-reduce's ring when any of it hides (its gradients come last)
    statistics = synchronized batch norm (``statistics_s``): each of its exchanges, forward
           and backward, a sum over every replica that the pass waits for, so none hides
           under compute: one round trip each (a collective's; a synchronous server's
           exchange when the kernel relays them through the chief, beside parameter servers
           across nodes) and its bytes both ways at the transport's bandwidth

A node's links share its network interface: transports and messages add up;
what it sends and what it receives overlap as far as the probe found
(``rpc_duplex``: 1 for a NIC; a loopback node whose one core also serializes
the bytes is nearer 0; a collective's bandwidth is measured both ways at once). The
slowest node sets the pace, as every replica waits for the step's last
gradient. Nodes that share a machine (``Calibration.machines``: the probe
reads each node's kernel) bound it from below together: the probe measures the
collective bandwidth with every node moving bytes at once, which on one
machine is the share of its cores each node gets, and a plan that funnels the
same bytes through one node (a relay through the chief, one parameter server)
does not move them faster for that: on 8 emulated hosts of 2 cores
resnet101's plans all moved 144-152 MB a step, the chief's relay at 355 MB/s
in all, where the probe's rpc figure of one transfer (0.44-1.1 GB/s) had
priced it at two to five times that. Nodes on machines of their own are not
bound so (a slow collective implementation is not a slow link). The wait and
the communication overlap (``beyond_compute_s``).
``compute`` is one replica's single-device step (:mod:`.compute`);
``BACKWARD_SHARE`` of it is backprop, under which a GPU's all-reduce can run
(``Calibration.overlap`` = 1) and a CPU replica's cannot (its cores also move
the bytes: 0).
"""
import dataclasses
from typing import Dict, Optional

from autodist.plan.contract import read_entries
from autodist.strategies.cost.calibration import node_bandwidth, shared_machines
from autodist.strategies.cost.traffic import COLLECTIVE, RPC, step_traffic
from autodist.strategies.inputs import BatchStatistics, relays_statistics

__all__ = ["BACKWARD_SHARE", "Compute", "Prediction", "node_comm_s", "predict", "exposed_comm_s", "fixed_step_s",
           "wait_s", "beyond_compute_s", "statistics_s", "last_bucket_s", "together_s",
           "busiest_machine", "machine_groups", "machine_label"]

#: Backprop's share of a training step's compute (two of the three matrix products per layer).
BACKWARD_SHARE = 2.0 / 3.0


@dataclasses.dataclass(frozen=True)
class Compute:
    """One replica's single-device step: measured (``source="measured"``) or estimated from its ops."""

    step_s: float
    source: str = "measured"
    sparse_rows: Dict[str, float] = dataclasses.field(default_factory=dict)   # rows per replica step
    batch: Optional[int] = None

    def to_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What one step of a plan is predicted to cost (seconds), and the node (or the machine) that limits it."""

    step_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    fixed_s: float
    bottleneck: str      # the node with the most communication ("machine of a, b, ...": its nodes together,
    #                      when their machine's bound is the larger, ``busiest_machine``), "" when nothing moves
    wait_s: float = 0.0  # a node's reads waiting for another node's compute
    statistics_s: float = 0.0   # synchronized batch norm's exchanges (``statistics_s``)
    relayed: bool = False       # the kernel relays the plan's all-reduce through the chief (``traffic.relayed``)

    @property
    def comm_share(self):
        """The part of the step spent waiting for communication (exposed, not hidden under backprop)."""
        return self.exposed_comm_s / self.step_s if self.step_s > 0 else 0.0

    def to_dict(self):
        data = {key: round(value * 1e3, 4) for key, value in (
            ("predicted_step_ms", self.step_s), ("compute_ms", self.compute_s), ("comm_ms", self.comm_s),
            ("exposed_comm_ms", self.exposed_comm_s), ("fixed_ms", self.fixed_s), ("wait_ms", self.wait_s),
            ("statistics_ms", self.statistics_s))}
        data.update(comm_share=round(self.comm_share, 4), bottleneck=self.bottleneck, relayed=self.relayed)
        return data


def node_comm_s(traffic, node, calibration):
    """Seconds ``node`` spends per step on its links, its local copies and its servers' work."""
    seconds = 0.0
    for transport, latency, bandwidth, duplex in (
            (RPC, calibration.rpc_latency_s, calibration.rpc_bandwidth, calibration.rpc_duplex),
            (COLLECTIVE, calibration.collective_latency_s, calibration.collective_bandwidth, 1.0)):
        bandwidth = node_bandwidth(calibration, node, bandwidth, transport)   # the node's own link
        sent, sent_messages = traffic.sent(node, transport)
        received, received_messages = traffic.received(node, transport)
        pulls = traffic.pulled(node) if transport == RPC else (0.0, 0.0)   # a phase of their own
        both_ways = _both_ways(sent - pulls[0], received - pulls[1], duplex) + _both_ways(*pulls, duplex)
        seconds += both_ways / bandwidth + max(sent_messages, received_messages) * latency
    seconds += traffic.local_bytes(node) / calibration.local_bandwidth
    seconds += traffic.local_ring_bytes(node) / calibration.local_collective_bandwidth
    seconds += traffic.server_bytes.get(node, 0.0) / calibration.update_bytes_per_s
    seconds += traffic.sparse_server_bytes.get(node, 0.0) / calibration.sparse_update_bytes_per_s
    seconds += traffic.sparse_apply_bytes.get(node, 0.0) / calibration.sparse_apply_bytes_per_s
    return seconds


def machine_groups(nodes, calibration):
    """``[(nodes, their collective bandwidths summed), ...]`` of every machine the probe found several of ``nodes``
    on (``Calibration.machines``; a node it has no name for is a machine of its own)."""
    return [(members, sum(node_bandwidth(calibration, node, calibration.collective_bandwidth, COLLECTIVE)
                          for node in members)) for members in shared_machines(calibration, nodes)]


def busiest_machine(traffic, nodes, calibration, groups=None):
    """``(seconds, its nodes)`` of the machine whose ``nodes`` take longest to send every byte of ``traffic``
    that leaves them, each node at its own collective bandwidth (the probe's figure with every node moving
    bytes at once: module docstring); ``(0.0, ())`` when no two nodes share a machine. ``groups``:
    ``machine_groups(nodes, calibration)``, when the caller keeps it (the search prices thousands of moves)."""
    found = (0.0, ())
    for members, bandwidth in (machine_groups(nodes, calibration) if groups is None else groups):
        sent = sum(traffic.sent(node, transport)[0] for node in members for transport in (RPC, COLLECTIVE))
        if sent > 0 and sent / bandwidth > found[0]:
            found = (sent / bandwidth, tuple(members))
    return found


def together_s(traffic, nodes, calibration, groups=None):
    """Seconds of ``busiest_machine``: the floor nodes that share a machine put under a step's communication."""
    return busiest_machine(traffic, nodes, calibration, groups)[0]


def machine_label(members):
    """How a prediction names a machine whose nodes together limit the step: ``machine of 10.0.0.1, 10.0.0.2``."""
    return "machine of " + ", ".join(sorted(members))


def _both_ways(sent, received, duplex):
    """Bytes' worth of time to send and receive at once: the larger, and the smaller as far as not duplex."""
    return max(sent, received) + (1.0 - duplex) * min(sent, received)


def exposed_comm_s(comm_s, compute_s, overlap, last_s=0.0):
    """Communication left after ``overlap`` of backprop hid what it could; at least ``last_s``, the ring of the
    fused all-reduce whose gradients backprop makes last (nothing is left to hide it; ``last_bucket_s``)."""
    exposed = comm_s - min(comm_s, overlap * BACKWARD_SHARE * compute_s)
    return max(exposed, min(comm_s, last_s)) if overlap > 0 else exposed


def last_bucket_s(traffic, calibration):
    """Seconds of the ring of ``traffic.last_bucket``: 2 (N - 1) / N of its bytes at the collective bandwidth and
    2 (N - 1) messages; 0 without one. Small buckets let all but the last hide under backprop, at a ring's
    messages each: AutoStrategy picks AllReduce's bucket size by this trade (``auto.BUCKET_CHOICES``)."""
    if traffic.last_bucket is None:
        return 0.0
    nbytes, n = traffic.last_bucket
    if n < 2:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / calibration.collective_bandwidth + 2 * (n - 1) * calibration.collective_latency_s


def predict(strategy, variables, compute, calibration, chief=None, statistics=None):
    """The :class:`Prediction` of ``strategy`` for its planned ``variables`` (``BuilderVariable``);
    ``chief``: the spec's chief, where a mixed plan relays its all-reduced gradients (``step_traffic``);
    ``statistics``: the graph's synchronized batch norm (``inputs.BatchStatistics``; None: none)."""
    traffic = step_traffic(strategy, variables, compute.sparse_rows, chief=chief)
    per_node = {node: node_comm_s(traffic, node, calibration) for node in traffic.nodes()}
    bottleneck = max(sorted(per_node), key=per_node.get, default="")
    machine_s, machine = busiest_machine(traffic, list(per_node), calibration)
    comm = max(per_node.get(bottleneck, 0.0), machine_s)
    if machine_s > per_node.get(bottleneck, 0.0) * (1 + 1e-9):   # the machine's nodes together set it (a tie
        bottleneck = machine_label(machine)                         # in rounding keeps the node)
    exposed = exposed_comm_s(comm, compute.step_s, calibration.overlap, last_bucket_s(traffic, calibration))
    fixed = fixed_step_s(traffic, calibration)
    wait = wait_s(traffic, compute)
    statistics = statistics or BatchStatistics()
    batch_norm = 0.0
    if statistics.exchanges:   # the plan read again only for them (10k variables: 0.3 s a read)
        entries = read_entries(strategy)
        batch_norm = statistics_s(statistics, relays_statistics(entries.variables.values(), entries.replicas),
                                  calibration)
    return Prediction(step_s=compute.step_s + fixed + batch_norm + beyond_compute_s(wait, exposed),
                      compute_s=compute.step_s, comm_s=comm, exposed_comm_s=exposed, fixed_s=fixed,
                      bottleneck=bottleneck, wait_s=wait, statistics_s=batch_norm,
                      relayed=traffic.relay_hub is not None)


def statistics_s(statistics, relayed, calibration):
    """Seconds a step's synchronized batch norm adds (module docstring): per exchange a round trip, and the
    bytes both ways."""
    if not statistics.exchanges:
        return 0.0
    round_trip, bandwidth = ((calibration.ps_step_s, calibration.rpc_bandwidth) if relayed
                             else (calibration.round_trip_s, calibration.collective_bandwidth))
    return statistics.exchanges * round_trip + 2.0 * statistics.bytes / bandwidth


def beyond_compute_s(wait, exposed):
    """A step's time beyond its compute and fixed cost: the wait for another node's compute and the
    exposed communication, which overlap. Measured on the loopback benchmark (``docs/cost_model.md``):
    mlp's, emb's and tiny's waits hide under their transfers (their PS plans measured 1-7 % from
    compute + communication, and 14-25 % under compute + wait + communication); cnn's PS plan, whose
    wait is four times its communication, paid both (12 % more than this predicts)."""
    return max(wait, exposed)


def wait_s(traffic, compute):
    """One more replica's compute when some node's reads wait for another node's (``StepTraffic.waits``):
    the other node's forward and backward pass runs first, then this node's."""
    return compute.step_s if traffic.waiting() else 0.0


def fixed_step_s(traffic, calibration):
    """The session step's own cost and its protocol's exchanges with other nodes: the synchronous
    parameter server's (``ps_step_s``), a collective's (``round_trip_s``, and ``sparse_gather_s`` more
    when it all-reduces sparse rows: the gathers of row counts before the rows' own, once a step however
    many tables: ncf's 4 and PartitionedAR's 10 pieces of them measured 2.3 and 2.0 ms beyond their
    messages on 2 hosts, the probe's 4 small tables 1.9); the two run side by side in one step, so the
    longer counts."""
    sparse = calibration.sparse_gather_s if traffic.gathers_sparse() else 0.0
    exchange = {RPC: calibration.ps_step_s, COLLECTIVE: calibration.round_trip_s + sparse}
    return calibration.fixed_step_s + max((exchange[t] for t in traffic.exchanges()), default=0.0)
