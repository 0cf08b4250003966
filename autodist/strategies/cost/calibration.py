"""The cost model's constants for one cluster: measured by the probe, or the spec's prior.

    calibration = load_calibration(spec)      # the cached probe, or None
    calibration = calibration or prior_calibration(spec)

A :class:`Calibration` holds per-transport latency and bandwidth (and
whether a node's parameter-server traffic flows both ways at once), the
in-process copy bandwidth, the parameter servers' cost per aggregated byte,
the fixed cost of one session step and of each sequential round trip to
another node, the fraction of backprop that communication can hide, and the
floating-point rate of one replica (for planning a graph nothing ran).

The probe (``autodist calibrate -r SPEC``, ``autodist.runtime.calibrate.probe``) writes the cache:
``~/.autodist/calibration/<key>.json``, the directory made 0700, keyed by a
hash of the spec's name and nodes (addresses, devices, bandwidths), so every
spec of the same cluster under the same name shares it. Without a probe, :func:`prior_calibration` turns
``network_bandwidth`` (Gbit/s per node; the slowest node bounds every link)
into both transports' bandwidth; the remaining constants are the named priors
below, typical of a datacenter network and a TensorFlow gRPC session.
"""
import dataclasses
import hashlib
import json
import os

from autodist.fileio import atomic_write_bytes, make_private_dirs

__all__ = ["Calibration", "prior_calibration", "spec_key", "calibration_path", "load_calibration",
           "save_calibration", "read_calibration_file", "write_calibration_file", "JOB_CALIBRATION_FILE",
           "DEFAULT_CALIBRATION_DIR", "PRIOR_LATENCY_S", "PRIOR_FIXED_STEP_S", "PRIOR_ROUND_TRIP_S",
           "PRIOR_FLOPS", "PRIOR_GPU_FLOPS", "PRIOR_LOCAL_BANDWIDTH", "PRIOR_UPDATE_BYTES_PER_S",
           "PRIOR_SPARSE_UPDATE_BYTES_PER_S", "PRIOR_PS_STEP_S", "PRIOR_OP_S", "PRIOR_LOCAL_COLLECTIVE_BANDWIDTH",
           "PROBE_VERSION", "node_bandwidth", "shared_machines"]

#: Where the probe's results are cached (``~`` expanded when used).
DEFAULT_CALIBRATION_DIR = os.path.join("~", ".autodist", "calibration")
#: The chief's calibration in a job's directory, next to its strategy: every node plans with it.
JOB_CALIBRATION_FILE = "calibration.json"
#: Priors for what the spec does not say: one gRPC message's latency, a session step's fixed cost,
#: a CPU replica's and a GPU replica's sustained float rate, in-process copies, a server's apply rate.
PRIOR_LATENCY_S = 100e-6
PRIOR_FIXED_STEP_S = 1e-3
PRIOR_ROUND_TRIP_S = 2 * PRIOR_LATENCY_S
#: A synchronous PS step waits for the pull, the push into the accumulator and the release token.
PRIOR_PS_STEP_S = 3 * PRIOR_ROUND_TRIP_S
PRIOR_FLOPS = 20e9
PRIOR_GPU_FLOPS = 25e12
PRIOR_LOCAL_BANDWIDTH = 5e9
PRIOR_UPDATE_BYTES_PER_S = 5e9
#: A sparse accumulator merges rows by index (a copy per row, no vectorized add): ~10x slower.
PRIOR_SPARSE_UPDATE_BYTES_PER_S = 5e8
#: What running one op costs the executor beyond its arithmetic (the probe read 0.08-0.33 us on this project's
#: machines; a busier or slower host pays more).
PRIOR_OP_S = 3e-7
#: A ring between two CPU replicas of one node, its hops' bytes: TensorFlow's collective executor all-reduced
#: 16 MiB between two CPU devices of one process in 7.3 ms (2 x 16 MiB of hops: 4.6 GB/s) where a copy runs at
#: 11-20 GB/s (GPUs' rings: the local bandwidth).
PRIOR_LOCAL_COLLECTIVE_BANDWIDTH = 4e9
#: What the probe measures changed (2: the other nodes' clients host their servers, steps are
#: callables, the one-float collective is a gather; 3: the sparse all-reduce's apply rate; 4: each node's
#: link rate; 5: an apply rate the wire already explains is the own rows' rate, not ~1e12 B/s; 6: an op's
#: cost, ``op_s``, and a ring between the chief's own CPUs; 7: the sparse all-reduces' chain of gathers,
#: ``sparse_gather_s``, and the servers' sparse rate beyond every other node's rows on the server's link, the
#: own rows' rate where the wire explains the step; 8: ``machines``, the nodes that share a machine's cores):
#: caches of an older probe are probed again.
PROBE_VERSION = 8


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Constants of the cost model (seconds, bytes per second, float operations per second)."""

    rpc_latency_s: float
    rpc_bandwidth: float
    rpc_duplex: float         # 1: a node sends and receives at once; 0: one after the other
    collective_latency_s: float
    collective_bandwidth: float
    local_bandwidth: float
    update_bytes_per_s: float
    sparse_update_bytes_per_s: float   # a server's rate on sparse gradients (accumulate rows, take, scatter)
    fixed_step_s: float       # a session step that stays on the chief
    round_trip_s: float       # a collective step's exchange with the other nodes
    ps_step_s: float          # a synchronous parameter server's pull, push, take and token with another node
    overlap: float            # 0: communication waits for backprop; 1: it hides under all of it
    flops: float              # one replica's float operations per second
    #: a replica of a sparse all-reduce on the other replicas' rows (mask, mean, apply)
    sparse_apply_bytes_per_s: float = PRIOR_SPARSE_UPDATE_BYTES_PER_S
    op_s: float = PRIOR_OP_S  # an op's cost to the executor beyond its arithmetic (``cost.compute``)
    #: a ring's bytes between two replicas of one node (the collective executor in process, not a copy)
    local_collective_bandwidth: float = PRIOR_LOCAL_COLLECTIVE_BANDWIDTH
    #: what a step's sparse all-reduces add to a collective step's round trip beyond their messages, bytes and
    #: apply: the gathers of row counts, then of the rows (every table's side by side); the prior adds nothing
    #: (probed: ``SPARSE_SMALL_TABLES`` small ones in a step)
    sparse_gather_s: float = 0.0
    source: str = "prior"     # "prior" or "probe"
    probe_version: int = 0    # the probe that measured it (PROBE_VERSION); 0 for a prior
    #: each node's link rate (bytes/s, by address; ``links``), and the link rate of the path each
    #: transport's bandwidth was measured on (``{"rpc": ..., "collective": ...}``): the model scales a
    #: transport per node by their ratio (``node_bandwidth``); empty: every node alike
    link_bandwidth: dict = dataclasses.field(default_factory=dict)
    link_reference: dict = dataclasses.field(default_factory=dict)
    #: each node's machine (by address: the kernel it runs on, read by the probe); nodes with one machine share
    #: its cores (``model.together_s``); empty, or a node missing: a machine of its own
    machines: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def rounded(self, digits=2):
        """The same constants to ``digits`` significant digits: a search over them ignores probe noise."""
        def keep(value):
            if isinstance(value, dict):
                return {key: keep(item) for key, item in value.items()}
            return float("{:.{}g}".format(value, digits)) if isinstance(value, float) else value
        return dataclasses.replace(self, **{f.name: keep(getattr(self, f.name)) for f in dataclasses.fields(self)})


def prior_calibration(spec):
    """Constants from the spec alone: ``network_bandwidth`` (slowest node) and the priors."""
    bandwidth = min(spec.network_bandwidth.values()) * 1e9 / 8
    links = {address: float(gbits) * 1e9 / 8 for address, gbits in spec.network_bandwidth.items()}
    on_gpus = spec.num_gpus > 0
    return Calibration(rpc_latency_s=PRIOR_LATENCY_S, rpc_bandwidth=bandwidth, rpc_duplex=1.0,
                       collective_latency_s=PRIOR_LATENCY_S, collective_bandwidth=bandwidth,
                       local_bandwidth=PRIOR_LOCAL_BANDWIDTH, update_bytes_per_s=PRIOR_UPDATE_BYTES_PER_S,
                       sparse_update_bytes_per_s=PRIOR_SPARSE_UPDATE_BYTES_PER_S,
                       fixed_step_s=PRIOR_FIXED_STEP_S, round_trip_s=PRIOR_ROUND_TRIP_S, ps_step_s=PRIOR_PS_STEP_S,
                       overlap=1.0 if on_gpus else 0.0,
                       local_collective_bandwidth=(PRIOR_LOCAL_BANDWIDTH if on_gpus
                                                   else PRIOR_LOCAL_COLLECTIVE_BANDWIDTH),
                       flops=PRIOR_GPU_FLOPS if on_gpus else PRIOR_FLOPS, source="prior",
                       link_bandwidth=links, link_reference={"rpc": bandwidth, "collective": bandwidth})


def spec_key(spec):
    """16 hex digits naming the cluster: the spec's name, its nodes' addresses, devices and bandwidths, in order.

    The name is part of it because addresses alone do not name machines: every ``autodist cluster`` has the
    addresses 10.77.0.x, and its spec's name carries an identity made afresh by each ``up``."""
    nodes = [[n.address, list(n.cpus), list(n.gpus), n.network_bandwidth] for n in spec.node_specs]
    return hashlib.sha256(json.dumps([spec.name, nodes], sort_keys=True).encode()).hexdigest()[:16]


def calibration_path(spec, directory=None):
    return os.path.join(os.path.expanduser(directory or DEFAULT_CALIBRATION_DIR), spec_key(spec) + ".json")


def read_calibration_file(path):
    """The :class:`Calibration` in ``path``, or None (no file, an unreadable one, one written before
    a field the model needs existed, or a probe's from before ``PROBE_VERSION``: the probe must run
    again)."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = Calibration.from_dict(json.load(handle))
    except (OSError, ValueError, TypeError):
        return None
    return None if found.source == "probe" and found.probe_version != PROBE_VERSION else found


def write_calibration_file(path, calibration):
    """Write ``calibration`` to ``path`` (mode 0600, atomically); returns the path."""
    atomic_write_bytes(path, json.dumps(calibration.to_dict(), indent=1, sort_keys=True).encode(), mode=0o600)
    return path


def load_calibration(spec, directory=None):
    """The cached probe of ``spec``'s cluster, or None (never probed, or an unreadable file)."""
    return read_calibration_file(calibration_path(spec, directory))


def save_calibration(spec, calibration, directory=None):
    """Cache ``calibration`` for ``spec``'s cluster (directory 0700, file 0600); returns the path."""
    path = calibration_path(spec, directory)
    make_private_dirs(os.path.dirname(path))
    return write_calibration_file(path, calibration)


def node_bandwidth(calibration, node, bandwidth, transport):
    """``bandwidth`` of ``transport`` ("rpc" / "collective") as ``node``'s link carries it.

    ``calibration.link_bandwidth[node]`` over the link rate of the path the
    transport was measured on (``link_reference``, measured by ``runtime.calibrate.links``): 1 x when the links are
    alike, or when the calibration has no link rates (an older probe).
    """
    links = calibration.link_bandwidth or {}
    reference = (calibration.link_reference or {}).get(transport)
    if node not in links or not reference:
        return bandwidth
    return bandwidth * links[node] / reference


def shared_machines(calibration, nodes):
    """``[[node, ...], ...]``: per machine the probe found several of ``nodes`` on (``Calibration.machines``), its
    nodes in ``nodes``' order; a node it has no name for is a machine of its own."""
    machines = {}
    for node in nodes:
        name = (calibration.machines or {}).get(node)
        if name is not None:
            machines.setdefault(name, []).append(node)
    return [members for members in machines.values() if len(members) > 1]
