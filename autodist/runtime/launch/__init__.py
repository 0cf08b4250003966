"""Launching a job: the chief's coordinator, one node's start, the servers, the chief's signals, the node logs.

    coordinator    Coordinator: preflight, ports, job directories, the scripts, watch, finish
    node           one node's start: its runner, job directory, ready handshake; a one-node job
    server         a node's TensorFlow server in the process that calls it (pinned to the node's cores)
    member_server  a launched node's server, hosted by its script's own process: one process per node
    chief_signals  Ctrl-C / SIGTERM to the chief stop the job; failures raised in the chief
    job_logs       each launched process's full log, on the chief, kept after the job

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []
