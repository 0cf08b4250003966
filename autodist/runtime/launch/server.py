"""A node's TensorFlow server, started in the process that calls it: one process per node.

``start_in_process`` starts the server of the process that calls it: the
chief of a job (``Coordinator.launch(serve_chief=True)``), a one-node job
(``node.single_node_job``), or a launched node's script
(``autodist.runtime.launch.member_server``), which then announces it on its
output with ``READY <port>``. A TensorFlow server cannot be stopped; this one
stays referenced, and serving, until the process ends.

A node's ``cores`` (resource spec) pin the process before its server starts
(``pin_to_cores``): every thread it has, and so every thread TensorFlow
creates afterwards, which inherits its creator's affinity.
"""
import os

from autodist.errors import LaunchError, ResourceSpecError

__all__ = ["start_in_process", "pin_to_cores", "held_by", "READY"]

READY = "AUTODIST_SERVER_READY"
_LISTEN = "0A"   # /proc/net/tcp's state of a listening socket
_BIND_FAILED = ("Failed to add port to server", "Could not start gRPC server")   # TensorFlow's lines of it
_IN_PROCESS = []   # the servers start_in_process started: referenced until the process ends


def pin_to_cores(cores, node=""):
    """Pin every thread of this process to ``cores`` (a sequence of core numbers; empty: leave it).

    Raises ``ResourceSpecError`` naming the node's ``cores`` key when the
    machine does not offer them to this process.
    """
    if not cores:
        return
    try:
        for tid in [0] + [int(t) for t in os.listdir("/proc/self/task")]:
            try:
                os.sched_setaffinity(tid, cores)
            except ProcessLookupError:   # a thread that ended meanwhile
                continue
    except OSError as e:
        raise ResourceSpecError("node {}: cannot pin its processes to cores {} ({}); this machine offers cores {}; "
                                "fix the node's 'cores' in the resource spec".format(
                                    node, list(cores), e.strerror or e, sorted(os.sched_getaffinity(0))),
                                key="cores") from e


def start_in_process(cluster, task, cpus, chief_task, threads=0, cores=()):
    """Start this process's TensorFlow server for ``task`` of ``cluster`` (``{"worker": [...]}``); returns it.

    ``cores``: pin the process first (``pin_to_cores``).
    """
    import tensorflow as tf
    from autodist.runner.console import call_quietly
    from autodist.spec.cluster import node_config, start_server
    pin_to_cores(cores, cluster["worker"][task])
    try:
        config = node_config(cpus, chief_task, threads or None, num_tasks=len(cluster["worker"]))
        server = call_quietly(start_server, cluster, task, config, dropped=_BIND_FAILED)
    except tf.errors.UnknownError as e:
        if "Could not start gRPC server" not in str(e):
            raise
        address = cluster["worker"][task]
        port = int(address.rpartition(":")[2])
        raise LaunchError("cannot start this process's TensorFlow server {} (task {} of the job): port {} is in use "
                          "on this machine{}; stop what holds it (another job on the same ports?) or give the job "
                          "other ports".format(address, task, port, held_by(port))) from None
    _IN_PROCESS.append(server)
    return server


def held_by(port):
    """``" (listening: 0.0.0.0:2222)"``: the local addresses that listen on ``port`` (``/proc/net/tcp``), or ""."""
    found = []
    for table, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            local, state = row[1], row[3]
            host, _, hex_port = local.partition(":")
            if state == _LISTEN and int(hex_port, 16) == port:
                found.append(_address(host, family, port))
    return " (listening: {})".format(", ".join(sorted(set(found)))) if found else ""


def _address(hex_host, family, port):
    """``/proc/net/tcp``'s little-endian hex address as ``host:port`` (``[v6]:port``)."""
    import ipaddress
    raw = bytes.fromhex(hex_host)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))   # each 32-bit word in host order
    host = ipaddress.ip_address(raw)
    return "{}:{}".format(host, port) if family == 4 else "[{}]:{}".format(host, port)
