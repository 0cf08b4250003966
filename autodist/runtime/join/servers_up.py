"""A launched node waits until every server of its job listens before it opens its session.

The chief starts the other nodes and waits for each one's "ready" (its
TensorFlow server is up) before its own session; a launched node reads the
plan the chief staged and could open its session at once. That session's
master reaches every server of the job, and a server that does not listen yet
refuses it. TensorFlow's gRPC channel to that server then fails every call at
once for its reconnect backoff (1 s, growing with each refusal), also calls of
the chief's steps that pass through this node: the first transfer between two
non-chief nodes (a partitioned variable's initialization) failed with
``UnavailableError`` when it fell in that backoff (4 emulated hosts, issue 40).
Plain TCP connections test the ports without touching TensorFlow's channels.

The wait is bounded (``SERVERS_TIMEOUT``, the chief's own bound on the nodes'
start is shorter, and it stops this process when one does not come) and says
every ``peers.REPORT_EVERY`` s whom it waits for.
"""
from autodist.runtime.join.peers import await_peers
from autodist.runtime.notices import notice

__all__ = ["await_servers", "SERVERS_TIMEOUT"]

SERVERS_TIMEOUT = 600.0   # s


def await_servers(context, timeout=SERVERS_TIMEOUT, say=None):
    """Return once every other server of ``context``'s job accepts TCP connections (s waited); ``JoinError`` at
    ``timeout`` naming the nodes still missing."""
    servers = {a: context.servers[a] for a in context.addresses if a != context.address}
    names = {a: "node {} ({}){}".format(a, s, " (the chief)" if a == context.chief else "")
             for a, s in servers.items()}
    say = say or (lambda text: notice(None, "{}: {}".format(context.address, text)))
    return await_peers(servers, names, timeout, say, bound="fixed for a node the chief launched; the chief ends "
                                                           "the job sooner when a node does not start")
