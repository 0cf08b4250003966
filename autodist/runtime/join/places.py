"""Where a platform-started process is in its job: one resolver per source, as tf.distribute's cluster resolvers.

Every process of the job is started by the platform with the same command;
each finds its place from its own environment (no process launches another):

    source          set by                               gives
    TF_CONFIG       Kubernetes TFJob, Vertex AI,          every task's "host:port"; this task's type and index
                    SageMaker                            (the chief, or worker 0 without one, is the chief;
                                                         evaluators are not in the job; ps tasks join as
                                                         CPU-only nodes with AUTODIST_INCLUDE_PS=1)
    Slurm tasks     srun --ntasks=N (SLURM_PROCID,       every task's node, one task a node, by the step's
                    SLURM_NTASKS > 1)                    distribution (``slurm_tasks``; arbitrary: exchanged
                                                         at start-up); task 0 is the chief
    MPI             mpirun -np N (OMPI_COMM_WORLD_RANK   this rank and the size; the chief's address in
                    / PMI_RANK and their sizes)          AUTODIST_CHIEF_ADDRESS (rank 0's host); the
                                                         others' addresses are exchanged at start-up
                                                         (``rendezvous``): each rank's is the address of
                                                         its interface that routes to the chief
    a spec file     you: AUTODIST_NODE_ADDRESS=<one of   the spec's nodes; this process is that node
                    the spec's addresses>

Ports (the TensorFlow server of each process): TF_CONFIG's; otherwise one rule,
task k listens on ``AUTODIST_PORT + k`` (default 29400 + k; a start-up
exchange, MPI's and Slurm's arbitrary one, also takes ``AUTODIST_PORT + size``), so that the
ports are distinct also when several nodes share a machine. Devices: every node has the devices this process sees,
``AUTODIST_CPUS_PER_NODE`` CPU replicas (default 1) when it has no GPU, or its
visible GPUs (``AUTODIST_GPUS_PER_NODE`` to say how many); a spec file says
it per node instead. The chief checks that every process agrees.
"""
import dataclasses
import json
import socket
from typing import Dict, Optional, Tuple

from autodist.errors import ResourceSpecError
from autodist.spec.convert import parse_tf_config

__all__ = ["Place", "resolve", "platform_started", "advertised_host", "route_address", "EXIT_RETRY", "DEFAULT_PORT", "NODE_ADDRESS_ENV",
           "CHIEF_ADDRESS_ENV", "ADVERTISE_ENV"]

DEFAULT_PORT = 29400
EXIT_RETRY = 143   # the status of a process stopped because another of its job failed or went away: retry the job
NODE_ADDRESS_ENV = "AUTODIST_NODE_ADDRESS"
CHIEF_ADDRESS_ENV = "AUTODIST_CHIEF_ADDRESS"
ADVERTISE_ENV = "AUTODIST_ADVERTISE_ADDRESS"
_MPI_RANKS = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
              ("PMIX_RANK", "PMIX_SIZE"))


@dataclasses.dataclass(frozen=True)
class Place:
    """This process's place: its rank among ``size``, every rank's ``"host:port"`` (None for MPI until the
    rendezvous), the chief's rank, and the nodes' device counts."""

    source: str                                  # "TF_CONFIG", "Slurm", "MPI", "spec"
    rank: int
    size: int
    chief: int
    servers: Optional[Tuple[str, ...]]           # rank -> "host:port"; None: exchanged at start-up
    chief_server: str                            # the chief's "host:port"
    cpus: int = 1
    gpus: int = 0
    spec_path: Optional[str] = None              # a spec file's path (source "spec")
    roles: Dict[int, str] = dataclasses.field(default_factory=dict)   # rank -> "ps" for parameter-server tasks
    rendezvous: Optional[str] = None             # "host:port" of the start-up exchange, when ``servers`` is None
    serves_rendezvous: bool = False              # this process serves it
    host: Optional[str] = None                   # this process's host as the others reach it (None: found then)


def _int(environ, name):
    text = environ.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise ResourceSpecError("expected a whole number, got {!r}".format(text), key=name) from None


def _rank(environ, rank_var, size_var):
    """``(size, rank)`` from the platform's variables: a size of 1 or more, a rank from 0 to size - 1."""
    size = _int(environ, size_var)
    if size < 1:
        raise ResourceSpecError("the job's size must be 1 or more, got {}".format(size), key=size_var)
    rank = _int(environ, rank_var)
    if not 0 <= rank < size:
        raise ResourceSpecError("this process's rank must be from 0 to {} ({} is {}), got {}".format(
            size - 1, size_var, size, rank), key=rank_var)
    return size, rank


def _port(environ):
    port = _int(environ, "AUTODIST_PORT") if environ.get("AUTODIST_PORT") else DEFAULT_PORT
    if not 1024 <= port <= 60000:
        raise ResourceSpecError("must be a TCP port from 1024 to 60000 (task k takes it + k), got {}".format(port),
                                key="AUTODIST_PORT")
    return port


def _devices(environ):
    cpus = _int(environ, "AUTODIST_CPUS_PER_NODE") if environ.get("AUTODIST_CPUS_PER_NODE") else 1
    if environ.get("AUTODIST_GPUS_PER_NODE"):
        gpus = _int(environ, "AUTODIST_GPUS_PER_NODE")
    else:
        visible = environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if not 1 <= cpus <= 1024 or not 0 <= gpus <= 1024:
        raise ResourceSpecError("AUTODIST_CPUS_PER_NODE must be 1 to 1024 and AUTODIST_GPUS_PER_NODE 0 to 1024, "
                                "got {} and {}".format(cpus, gpus), key="AUTODIST_CPUS_PER_NODE")
    return cpus, gpus


def _by_rule(hosts, port):
    """``"host:port"`` per task: task k listens on the base port + k."""
    return tuple("{}:{}".format(host, port + k) for k, host in enumerate(hosts))


def _from_tf_config(environ):
    text = environ.get("TF_CONFIG")
    parse_tf_config(text)   # the checks, with their messages
    config = json.loads(text)
    cluster, task = config["cluster"], config.get("task") or {}
    kind, index = task.get("type"), task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ResourceSpecError("expected a task index, a whole number >= 0, got {!r}".format(index),
                                key="TF_CONFIG task.index")
    include_ps = environ.get("AUTODIST_INCLUDE_PS") == "1"
    if kind == "evaluator":
        raise ResourceSpecError("this process is TF_CONFIG's evaluator, which is not part of the training job: "
                                "evaluate in a script of its own (autodist.checkpoint.Saver reads the job's "
                                "checkpoints)", key="task.type")
    order = [("chief", cluster.get("chief") or cluster.get("master") or []), ("worker", cluster.get("worker", []))]
    order += [("ps", cluster.get("ps", []))] if include_ps else []
    servers, ranks, roles = [], {}, {}
    for name, entries in order:
        for i, entry in enumerate(entries):
            ranks[(name, i)] = len(servers)
            roles[len(servers)] = name
            servers.append(entry.strip())
    key = ("chief" if kind == "master" else kind, index)
    if key not in ranks:
        raise ResourceSpecError("this process is task {} {!r}, which does not train{}".format(
            index, kind, "" if kind != "ps" else " unless AUTODIST_INCLUDE_PS=1 makes parameter-server tasks "
            "nodes of the job"), key="task")
    cpus, gpus = _devices(environ)
    return Place("TF_CONFIG", ranks[key], len(servers), 0, tuple(servers), servers[0], cpus, gpus,
                 roles={r: "ps" for r, name in roles.items() if name == "ps"})


def _from_slurm(environ):
    from autodist.runtime.join.slurm_tasks import slurm_tasks
    _rank(environ, "SLURM_PROCID", "SLURM_NTASKS")   # a size of 1 or more, a rank inside it: one line if not
    tasks = slurm_tasks(environ, lambda name: _int(environ, name))
    port = _port(environ)
    cpus, gpus = _devices(environ)
    if tasks.hosts is None:   # srun's arbitrary distribution: the tasks tell each other their nodes at the start
        return Place("Slurm", tasks.rank, tasks.size, 0, None, None, cpus, gpus, rendezvous="{}:{}".format(
            tasks.first, port + tasks.size), serves_rendezvous=tasks.serves_exchange, host=tasks.own)
    servers = _by_rule(tasks.hosts, port)
    return Place("Slurm", tasks.rank, tasks.size, 0, servers, servers[0], cpus, gpus)


def _from_mpi(environ):
    rank_var, size_var = next(pair for pair in _MPI_RANKS if environ.get(pair[0]))
    size, rank = _rank(environ, rank_var, size_var)
    chief = environ.get(CHIEF_ADDRESS_ENV, "").strip()
    if not chief:
        raise ResourceSpecError("is not set: under MPI every rank needs the chief's address (rank 0's host, as "
                                "the other ranks reach it), e.g. mpirun -x {}=node0 ...".format(CHIEF_ADDRESS_ENV),
                                key=CHIEF_ADDRESS_ENV)
    cpus, gpus = _devices(environ)
    host = environ.get(ADVERTISE_ENV, "").strip() or (chief if rank == 0 else None)   # None: the route to the chief
    return Place("MPI", rank, size, 0, None, None, cpus, gpus, rendezvous="{}:{}".format(chief, _port(environ) + size),
                 serves_rendezvous=rank == 0, host=host)


def _from_spec(environ, spec):
    address = environ[NODE_ADDRESS_ENV].strip()
    addresses = [n.address for n in spec.node_specs]
    if address not in addresses:
        raise ResourceSpecError("{!r} is not a node of {} (its nodes: {})".format(
            address, spec.path, ", ".join(addresses)), key=NODE_ADDRESS_ENV)
    servers = _by_rule(addresses, _port(environ))
    chief = addresses.index(spec.chief)
    return Place("spec", addresses.index(address), len(addresses), chief, servers, servers[chief],
                 spec_path=spec.path)


def platform_started(environ):
    """Which source would place this process (None: it was not started by a platform as part of a job)."""
    if environ.get(NODE_ADDRESS_ENV):
        return "spec"
    if environ.get("TF_CONFIG"):
        return "TF_CONFIG"
    if environ.get("SLURM_PROCID") and environ.get("SLURM_STEP_ID") is not None and \
            environ.get("SLURM_NTASKS", "1").strip() not in ("", "0", "1"):
        return "Slurm"
    if any(environ.get(rank) for rank, _ in _MPI_RANKS):
        return "MPI"
    return None


def resolve(environ, spec=None):
    """This process's ``Place`` from ``environ`` (``spec``: the ResourceSpec of a spec file, for that source)."""
    source = platform_started(environ)
    if source is None:
        raise ResourceSpecError("found no job in the environment: start every process of the job with TF_CONFIG "
                                "(Kubernetes), srun --ntasks, mpirun, or {} and a resource spec file"
                                .format(NODE_ADDRESS_ENV))
    if source == "spec":
        if spec is None:
            raise ResourceSpecError("is set: pass the resource spec file it is an address of, AutoDist(spec)",
                                    key=NODE_ADDRESS_ENV)
        return _from_spec(environ, spec)
    return {"TF_CONFIG": _from_tf_config, "Slurm": _from_slurm, "MPI": _from_mpi}[source](environ)


def route_address(host, port):
    """The address of this machine's interface that routes to ``host`` (no packet is sent), or None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror:
        return None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.connect(address)   # a datagram socket's connect only picks the route
                return sock.getsockname()[0]
            except OSError:
                continue
    return None


def advertised_host(place):
    """This process's host as the others reach it, for the start-up exchange: its place's (the chief's address
    under MPI, the Slurm node's name, ``AUTODIST_ADVERTISE_ADDRESS``), else the address of the interface that
    routes to the exchange's host (run once that host answers), else the host's fully qualified name."""
    if place.host:
        return place.host
    host, _, port = place.rendezvous.rpartition(":")
    found = route_address(host.strip("[]"), int(port))
    if found is None:
        return socket.getfqdn()
    return "[{}]".format(found) if ":" in found else found
