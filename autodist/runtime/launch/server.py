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

from autodist.errors import ResourceSpecError

__all__ = ["start_in_process", "pin_to_cores", "READY"]

READY = "AUTODIST_SERVER_READY"
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
    from autodist.spec.cluster import node_config, start_server
    pin_to_cores(cores, cluster["worker"][task])
    server = start_server(cluster, task, node_config(cpus, chief_task, threads or None,
                                                     num_tasks=len(cluster["worker"])))
    _IN_PROCESS.append(server)
    return server
