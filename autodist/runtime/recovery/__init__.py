"""Surviving a failed node: restarting a job's attempts, and leaving out nodes that cannot be reached.

    restart        ``autodist run --max-restarts`` / ``AutoDist(max_restarts=)``: the supervisor of attempts
    shrink         at a relaunch, the nodes that fail preflight left out (``min_nodes``)

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []
