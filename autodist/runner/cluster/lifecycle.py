"""Make, change and remove an emulated cluster (``autodist cluster up | exec | link | down``).

    up(names, 3, rate, "spec.yml")   state.json first (so ``down`` finds a half-made cluster), the switch,
                                     node after node, keys, an sshd per node, (``slurm``) munged, slurmctld
                                     and a slurmd per node, (``mpi``) mpirun's hostfile and parameters, the
                                     spec; any failure or Ctrl-C on the way removes what was made
    exec_argv(names, "0", argv)      ["ip", "netns", "exec", "autodist-NAME-0", "env", SLURM_CONF=...,
                                     OMPI_MCA_mca_param_files=... (when made), *argv]
    link(names, "1", "down")         cut / restore / reshape one node's link while a job runs
    down(names)                      stop the sshds, every process left in the namespaces, the namespaces
                                     (links, bridge and qdiscs go with them), the spec ``up`` wrote, the files

``down`` reads nothing it has to trust: it lists namespaces by the cluster's
prefix, stops only the sshd whose pid file still names a process started with
this cluster's config, and removes the spec only when its first line is the
mark ``up`` wrote for this cluster; it is idempotent and works after any crash.
"""
import dataclasses
import json
import os
import secrets
import shutil

from autodist.errors import ArgumentError, ClusterError
from autodist.fileio import atomic_write_bytes, make_private_dirs
from autodist.runner.cluster import mpi as mpi_files
from autodist.runner.cluster import network, sshd
from autodist.runner.cluster import slurm as slurm_daemons
from autodist.runner.cluster.names import MAX_NODES
from autodist.runner.cluster.specfile import is_ours, spec_data, write_spec

__all__ = ["up", "down", "link", "exec_argv", "node_index", "read_state", "require_root", "ClusterState"]


@dataclasses.dataclass(frozen=True)
class ClusterState:
    """What ``up`` made, as recorded in ``state.json`` (written before anything else is made)."""

    name: str
    nodes: int
    rate: int            # bit/s each way, as made by ``up`` (``link ... rate`` changes one link afterwards)
    spec: str            # absolute path of the resource spec
    cores: tuple = ()
    threads: int = 0
    slurm: bool = False  # a Slurm controller, a slurmd per node and munged (``runner.cluster.slurm``)
    mpi: bool = False    # mpirun's hostfile and parameters (``runner.cluster.mpi``)


def require_root(what):
    if os.geteuid() != 0:
        raise ClusterError("autodist cluster {} needs root (network namespaces, links and rate limits are "
                           "root's to make): run it with sudo".format(what))


def read_state(names):
    """The cluster's ``ClusterState``, or None when it has none (never made, removed, or ``up`` crashed early)."""
    try:
        with open(names.state_file) as f:
            data = json.load(f)
        return ClusterState(**{k: tuple(tuple(c) for c in v) if k == "cores" else v for k, v in data.items()})
    except (OSError, ValueError, TypeError):
        return None


def _check_new(names, count, spec_path, slurm=False, mpi=False):
    if not 1 <= count <= MAX_NODES:
        raise ArgumentError("-n {}: a cluster has 1 to {} nodes".format(count, MAX_NODES))
    found = network.namespaces(names)
    if found or os.path.exists(names.state_dir):
        raise ClusterError("cluster {!r} exists ({}): remove it first with `autodist cluster down --name {}`, or "
                           "choose another --name".format(names.name, ", ".join(found) or names.state_dir,
                                                             names.name))
    if os.path.exists(spec_path):
        raise ClusterError("{} exists: the cluster's spec is a new file; remove it or choose another -o".format(
            spec_path))
    folder = os.path.dirname(spec_path)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise ClusterError("-o {}: cannot write the cluster's spec there: {} {}; make it first or choose another "
                           "-o (nothing was made)".format(spec_path, folder, "is not writable" if os.path.isdir(
                               folder) else "is not a directory"))
    reasons = [sshd.missing_reason(), slurm and slurm_daemons.missing_reason(), mpi and mpi_files.missing_reason()]
    for reason in reasons:
        if reason:
            raise ClusterError("cluster {!r}: {}".format(names.name, reason))


def up(names, count, rate, spec_path, cores=(), threads=0, say=print, slurm=False, mpi=False):
    """Make the cluster (see the module docstring); returns its ``ClusterState``. ``rate`` in bit/s."""
    require_root("up")
    spec_path = os.path.abspath(spec_path)
    _check_new(names, count, spec_path, slurm, mpi)
    cores = tuple(tuple(cores[i % len(cores)]) for i in range(count)) if cores else ()
    state = ClusterState(names.name, count, rate, spec_path, cores, threads, slurm, mpi)
    try:
        make_private_dirs(names.state_dir)
        atomic_write_bytes(names.state_file, json.dumps(dataclasses.asdict(state)).encode())
        say("cluster {!r}: making {} node(s), links at {} each way".format(names.name, count,
                                                                         network.format_rate(rate)))
        network.make_switch(names)
        for index in range(count):
            network.add_node(names, index, rate)
        sshd.make_keys(names, count)
        pids = [sshd.start(names, index) for index in range(count)]
        if slurm:
            say("cluster {!r}: starting munged, slurmctld and {} slurmd".format(names.name, count))
            slurm_daemons.make(names, count)
        if mpi:
            mpi_files.make(names, count)
        write_spec(spec_path, names, spec_data(names, count, rate, cores, threads, identity=secrets.token_hex(4)))
    except BaseException:
        down(names, say=lambda line: None)
        raise
    for line in _made(names, state, pids):
        say(line)
    return state


def _made(names, state, pids):
    yield "cluster {!r} is up: {} node(s) on bridge {} in namespace {}, every link {} each way (tc tbf)".format(
        names.name, state.nodes, names.bridge, names.switch, network.format_rate(state.rate))
    for index in range(state.nodes):
        role = "chief: `autodist cluster exec --name {} {} -- python SCRIPT`".format(names.name, index) \
            if index == 0 else "reached over SSH"
        yield "  node {}  {:<11} namespace {}  {}  sshd pid {}; {}".format(
            index, names.address(index), names.namespace(index), names.port(index), pids[index], role)
    if state.slurm:
        yield "  Slurm: slurmctld on {}:6817 (node 0), a slurmd on every node (named by its address), partition {}; " \
              "`autodist cluster exec --name {} 0 -- sbatch SCRIPT` (it sets SLURM_CONF)".format(
                  names.address(0), slurm_daemons.PARTITION, names.name)
    if state.mpi:
        yield "  MPI: `autodist cluster exec --name {} 0 -- mpirun -np {} ...` reaches every node over its sshd " \
              "(hostfile and parameters in OMPI_MCA_mca_param_files)".format(names.name, state.nodes)
    yield "  files: {} (state.json, keys, known_hosts, sshd configs, pid files and logs)".format(names.state_dir)
    yield "  resource spec: {}".format(state.spec)
    yield "  remove it all with `autodist cluster down --name {}`".format(names.name)


def node_index(names, node, state=None):
    """The index of ``node`` (an index, an address or a namespace name) in an existing cluster."""
    state = state or read_state(names)
    existing = {names.index_of_namespace(ns) for ns in network.namespaces(names)} - {"sw", None}
    if not existing:
        raise ClusterError("cluster {!r} does not exist: make it with `autodist cluster up --name {} -n N -o "
                           "SPEC.yml`".format(names.name, names.name))
    text = str(node)
    candidates = {str(i): i for i in existing}
    candidates.update({names.address(i): i for i in existing})
    candidates.update({names.namespace(i): i for i in existing})
    if text not in candidates:
        raise ArgumentError("node {!r}: cluster {!r} has nodes {} (an index, an address {} or a namespace)".format(
            text, names.name, ", ".join(str(i) for i in sorted(existing)), names.address(0)))
    return candidates[text]


def exec_argv(names, node, argv):
    """The argv that runs ``argv`` inside ``node``'s namespace (``ip netns exec`` keeps the environment)."""
    require_root("exec")
    if not argv:
        raise ArgumentError("autodist cluster exec: no command given (autodist cluster exec NODE -- CMD ...)")
    state = read_state(names)
    env = dict(slurm_daemons.environment(names) if state is not None and state.slurm else {},
               **(mpi_files.environment(names) if state is not None and state.mpi else {}))
    prefix = ["env"] + ["{}={}".format(k, v) for k, v in sorted(env.items())] if env else []
    return ["ip", "netns", "exec", names.namespace(node_index(names, node, state))] + prefix + list(argv)


def link(names, node, action, rate=None):
    """``action`` ``down`` / ``up`` / ``rate`` on ``node``'s link; returns a line saying what it did."""
    require_root("link")
    index = node_index(names, node)
    if action in ("down", "up"):
        network.set_link(names, index, up=action == "up")
        return "cluster {!r}: node {} ({}) link {}".format(names.name, index, names.address(index), action)
    if action == "rate":
        bits = network.parse_rate(rate)
        network.shape(names, index, bits)
        return "cluster {!r}: node {} ({}) link at {} each way".format(names.name, index, names.address(index),
                                                                     network.format_rate(bits))
    raise ArgumentError("link action {!r}: expected down, up or rate RATE".format(action))


def down(names, say=print):
    """Remove everything the cluster ``names`` made (see the module docstring); returns what was removed."""
    require_root("down")
    state = read_state(names)
    removed = []
    count = state.nodes if state else 0
    for index in range(max(count, _pid_files(names))):
        if sshd.stop(names, index):
            removed.append("sshd of node {}".format(index))
    removed += slurm_daemons.stop(names, max(count, _pid_files(names)))
    namespaces, stuck = network.remove(names)
    removed += ["namespace " + ns for ns in namespaces]
    if state and is_ours(state.spec, names):
        os.unlink(state.spec)
        removed.append("spec " + state.spec)
    if os.path.isdir(names.state_dir):
        shutil.rmtree(names.state_dir)
        removed.append("files " + names.state_dir)
    if stuck:
        raise ClusterError("cluster {!r}: process(es) {} in its namespaces did not end after SIGKILL; the "
                           "namespaces' names are gone, the namespaces go when they do".format(
                               names.name, ", ".join(map(str, stuck))))
    say("cluster {!r}: {}".format(names.name, "removed " + ", ".join(removed) if removed else "nothing to remove"))
    return removed


def _pid_files(names):
    """One more than the highest node index with an sshd pid file (a cluster whose state.json is missing)."""
    try:
        entries = os.listdir(names.state_dir)
    except OSError:
        return 0
    found = [int(e.split("_")[1].split(".")[0]) for e in entries
             if e.startswith("sshd_") and e.endswith(".pid") and e.split("_")[1].split(".")[0].isdigit()]
    return max(found) + 1 if found else 0
