"""Least-loaded placement of variables (or shards) on parameter servers.

AutoDist assigns variables greedily in graph order: each goes to the server
with the least bytes so far. Greedy placement always ends with

    max load <= mean load + largest item

(the server that ends up fullest was at most average before its last item),
so it is good when items are small next to the mean load and poor otherwise:
a big variable placed late lands on top of an already average server. Placing
the *largest items first* (LPT) removes that failure, and splitting items
larger than a few percent of the mean load (``PartitionedPS``) makes the bound
itself tight. Ties go to the lower server index and the lower variable index,
so the result depends only on the inputs.
"""
import heapq

__all__ = ["LoadBalancer", "largest_first"]


class LoadBalancer:
    """Byte loads of ``m`` servers with O(log m) least-loaded queries.

    ``least_loaded(k)`` removes the ``k`` least loaded servers from the queue;
    every index it returns must be given back with :meth:`charge` (possibly 0
    bytes) before the next query.
    """

    def __init__(self, num_servers):
        if num_servers < 1:
            raise ValueError("a LoadBalancer needs at least one server")
        self.loads = [0] * num_servers
        self._heap = [(0, i) for i in range(num_servers)]

    def __len__(self):
        return len(self.loads)

    def place(self, nbytes):
        """Put ``nbytes`` on the least loaded server; returns its index."""
        load, index = self._heap[0]
        load += nbytes
        self.loads[index] = load
        heapq.heapreplace(self._heap, (load, index))
        return index

    def least_loaded(self, k):
        """The ``min(k, m)`` least loaded servers, least loaded first (taken off the queue)."""
        return [heapq.heappop(self._heap)[1] for _ in range(min(k, len(self.loads)))]

    def charge(self, index, nbytes):
        """Add ``nbytes`` to a server taken by :meth:`least_loaded` and put it back."""
        self.loads[index] += nbytes
        heapq.heappush(self._heap, (self.loads[index], index))


def largest_first(sizes):
    """Indices of ``sizes`` from the largest to the smallest, equal sizes in index order."""
    return sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
