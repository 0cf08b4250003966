"""A node's TensorFlow server: a process of its own on the other nodes, in process on the chief.

    python -m autodist.runtime.server --job-id ID --cluster '{"worker": ["10.0.0.1:4711", ...]}' --task 1 --cpus 2 --chief-task 0

Prints ``AUTODIST_SERVER_READY <port>`` once the server listens, then serves
until it is terminated or its parent process goes away (the chief's
coordinator, or the SSH session that started it), so that a server never
outlives its job. ``--job-id`` only labels the process (``ps`` shows which job
a server belongs to).

``start_in_process`` starts the server of the process that calls it (the
chief of a job, or a one-node job). A TensorFlow server cannot be stopped;
this one stays referenced, and serving, until the process ends.
"""
import argparse
import json
import os
import sys
import time

__all__ = ["main", "start_in_process", "READY"]

READY = "AUTODIST_SERVER_READY"
_IN_PROCESS = []   # the servers start_in_process started: referenced until the process ends


def _parser():
    parser = argparse.ArgumentParser(prog="python -m autodist.runtime.server", description=__doc__.splitlines()[0])
    parser.add_argument("--job-id", default="", help="the job this server belongs to (a label for ps)")
    parser.add_argument("--cluster", required=True, help="cluster spec as JSON: {\"worker\": [\"host:port\", ...]}")
    parser.add_argument("--task", type=int, required=True, help="this node's task index")
    parser.add_argument("--cpus", type=int, default=1, help="number of CPU devices to expose")
    parser.add_argument("--chief-task", type=int, default=0, help="the chief's task index (collective leader)")
    parser.add_argument("--threads", type=int, default=0, help="intra/inter-op threads (0: TensorFlow's default)")
    return parser


def start_in_process(cluster, task, cpus, chief_task, threads=0):
    """Start this process's TensorFlow server for ``task`` of ``cluster`` (``{"worker": [...]}``); returns it."""
    from autodist.spec.cluster import node_config, start_server
    server = start_server(cluster, task, node_config(cpus, chief_task, threads or None))
    _IN_PROCESS.append(server)
    return server


def main(argv=None):
    args = _parser().parse_args(argv)
    cluster = json.loads(args.cluster)
    from autodist.spec.cluster import node_config, start_server
    server = start_server(cluster, args.task, node_config(args.cpus, args.chief_task, args.threads or None))
    port = cluster["worker"][args.task].rsplit(":", 1)[1]
    print("{} {}".format(READY, port), flush=True)
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1.0)
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
