"""``autodist cluster``: separate hosts on one Linux machine, for trying and testing multi-host jobs.

Each node is a network namespace with its own network stack, address
(10.77.0.<i+1>), sshd and a link to a bridge shaped with ``tc tbf`` in both
directions; node 0 runs the chief's script (``autodist cluster exec``), the
others are reached over SSH as real hosts are. Rooms: ``names`` (the one
place that names every object made), ``network`` (``ip``/``tc`` argv lists),
``sshd`` (keys and servers), ``specfile`` (the resource spec), ``lifecycle``
(up, exec, link, down). Root only; nothing here runs on import.
"""
from autodist.runner.cluster.lifecycle import ClusterState, down, exec_argv, link, node_index, read_state, up
from autodist.runner.cluster.names import DEFAULT_NAME, ClusterNames
from autodist.runner.cluster.network import format_rate, parse_rate

__all__ = ["ClusterNames", "ClusterState", "DEFAULT_NAME", "up", "down", "link", "exec_argv", "node_index",
           "read_state", "parse_rate", "format_rate"]
