"""Which session calls wait for the other nodes: the steps a stall report counts.

A node's session calls are not all alike. A training step runs the ops the
kernels put in to synchronize the replicas (a collective all-reduce, a
broadcast, the token queues and gradient accumulators of a parameter-server
step): no node gets past it before every node has reached it. Other calls
(the chief reading a variable for a log line or a checkpoint, a chief-only
hook) run on one node and wait for nobody. Stall reports
(``autodist.runtime.watch.stall``) number the steps by the calls that synchronize,
so that a chief's extra calls do not make it look ahead of the others::

    chief   run(train) run(w) run(w) run(train)      calls 4, training steps 2
    worker  run(train)               run(train)      calls 2, training steps 2

``SyncIndex(graph).synchronizes(names)`` walks the ops the names run (their
inputs and control inputs) once per set of names and remembers the answer.
In a graph without any such op (asynchronous parameter servers: no node
waits for another) every call counts, as the calls are all the steps there are.
A queue of the user's own input pipeline counts like the kernels' queues.
"""
from autodist.kernel.walks import ancestors

__all__ = ["SyncIndex", "SYNC_OP_TYPES"]

_KNOWN = 1024   # sets of names remembered; a script fetching ever new sets starts over

#: Op types that wait for other nodes (the kernels' collectives, queues and accumulators).
SYNC_OP_TYPES = frozenset([
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGather", "CollectiveGatherV2",
    "CollectiveBcastSend", "CollectiveBcastRecv", "CollectiveBcastSendV2", "CollectiveBcastRecvV2",
    "CollectiveAllToAllV2", "CollectiveAllToAllV3",
    "QueueDequeue", "QueueDequeueV2", "QueueDequeueMany", "QueueDequeueManyV2", "QueueDequeueUpTo",
    "QueueDequeueUpToV2",
    "AccumulatorTakeGradient", "ResourceAccumulatorTakeGradient", "SparseAccumulatorTakeGradient",
])


class SyncIndex:
    """Answers "does running these names wait for other nodes?" for one graph (see the module docstring)."""

    def __init__(self, graph):
        self._graph = graph
        self._known = {}   # tuple of names -> bool
        self._any = None   # whether the graph has a synchronizing op at all

    def synchronizes(self, names):
        """True when running ``names`` (op or tensor names of the graph) runs a synchronizing op."""
        key = tuple(names)
        found = self._known.get(key)
        if found is None:
            if self._any is None:
                self._any = any(op.type in SYNC_OP_TYPES for op in self._graph.get_operations())
            if len(self._known) >= _KNOWN:
                self._known.clear()
            found = self._known[key] = not self._any or self._walk(key)
        return found

    def _walk(self, names):
        graph = self._graph
        roots = [graph.get_operation_by_name(name.split(":")[0]) for name in names]
        return any(op.type in SYNC_OP_TYPES for op in ancestors(roots))
