"""A node's TensorFlow server: a process of its own on the other nodes, in process on the chief.

    python -m autodist.runtime.launch.server --job-id ID --cluster '{"worker": ["10.0.0.1:4711", ...]}' --task 1 --cpus 2 --chief-task 0 [--cores 0,1]

Prints ``AUTODIST_SERVER_READY <port>`` once the server listens, then serves
until it is terminated or its parent process goes away (the chief's
coordinator, or the SSH session that started it), so that a server never
outlives its job. ``--job-id`` only labels the process (``ps`` shows which job
a server belongs to).

``start_in_process`` starts the server of the process that calls it (the
chief of a job, a one-node job, or a launched node's script:
``autodist.runtime.launch.member_server``). A TensorFlow server cannot be stopped;
this one stays referenced, and serving, until the process ends.

A node's ``cores`` (resource spec) pin the process before its server starts
(``pin_to_cores``): every thread it has, and so every thread TensorFlow
creates afterwards, which inherits its creator's affinity.
"""
import argparse
import json
import os
import sys
import time

from autodist.errors import ResourceSpecError

__all__ = ["main", "start_in_process", "pin_to_cores", "READY"]

READY = "AUTODIST_SERVER_READY"
_IN_PROCESS = []   # the servers start_in_process started: referenced until the process ends


def _parser():
    parser = argparse.ArgumentParser(prog="python -m autodist.runtime.launch.server", description=__doc__.splitlines()[0])
    parser.add_argument("--job-id", default="", help="the job this server belongs to (a label for ps)")
    parser.add_argument("--cluster", required=True, help="cluster spec as JSON: {\"worker\": [\"host:port\", ...]}")
    parser.add_argument("--task", type=int, required=True, help="this node's task index")
    parser.add_argument("--cpus", type=int, default=1, help="number of CPU devices to expose")
    parser.add_argument("--chief-task", type=int, default=0, help="the chief's task index (collective leader)")
    parser.add_argument("--threads", type=int, default=0, help="intra/inter-op threads (0: TensorFlow's default)")
    parser.add_argument("--cores", default="", help="comma-separated CPU cores to pin the process to (default: none)")
    return parser


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
    server = start_server(cluster, task, node_config(cpus, chief_task, threads or None))
    _IN_PROCESS.append(server)
    return server


def main(argv=None):
    args = _parser().parse_args(argv)
    cluster = json.loads(args.cluster)
    server = start_in_process(cluster, args.task, args.cpus, args.chief_task, args.threads,
                              [int(c) for c in args.cores.split(",") if c])
    port = cluster["worker"][args.task].rsplit(":", 1)[1]
    print("{} {}".format(READY, port), flush=True)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1.0)
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
