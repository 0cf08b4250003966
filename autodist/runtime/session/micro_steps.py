"""Which calls of a node's session run a train op's micro-step twin: k-1 of every k (gradient accumulation).

The accumulate pass (``autodist.kernel.accumulate``) gives every accumulated
train op T a twin that only adds the call's gradients to the replica's
accumulators. The session runs the twin in place of T on the first k-1 of
every k calls that fetch T, and T itself (synchronize, apply, zero the
accumulators) on the k-th::

    call      1     2     3     4     5 ...         (k = 4)
    runs      twin  twin  twin  T     twin ...

Every node makes the same calls in the same order (synchronous training), so
every node counts the same. Calls that fetch several accumulated train ops
count together; calls that fetch none (evaluation, a read) do not count.
"""
__all__ = ["MicroSteps"]


class MicroSteps:
    """The accumulation schedule of one session (see the module docstring)."""

    def __init__(self, twins, steps, prefixes):
        """``twins``: {train op: its twin} (single-device names); ``prefixes``: this node's replica prefixes."""
        self.steps = steps if twins else 1
        self._twin_of = {prefix + train: prefix + twin for train, twin in twins.items() for prefix in prefixes}
        self._counts = {}

    def accumulated(self, names):
        """The names among ``names`` of train op copies that have twins (a frozenset; empty: none)."""
        if self.steps <= 1:
            return frozenset()
        return frozenset(n for n in names if n in self._twin_of)

    def next_is_micro(self, accumulated):
        """Count one call fetching ``accumulated``; whether it is a micro-step (else the update)."""
        count = self._counts.get(accumulated, 0)
        self._counts[accumulated] = count + 1
        return count % self.steps != self.steps - 1

    def twins(self, names):
        """``names`` with every accumulated train op copy replaced by its twin."""
        return [self._twin_of.get(n, n) for n in names]

    @property
    def at_update_boundary(self):
        """Whether no accumulation is under way: every train op's last call applied its update (or none ran)."""
        return all(count % self.steps == 0 for count in self._counts.values())
