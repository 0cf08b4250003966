"""Which calls of a node's session run a train op's micro-step twin: k-1 of every k (gradient accumulation).

The accumulate pass (``autodist.kernel.accumulate``) gives every accumulated
train op T a twin that only adds the call's gradients to the replica's
accumulators. The session runs the twin in place of T on the first k-1 of
every k calls that fetch T, and T itself (synchronize, apply, zero the
accumulators) on the k-th::

    call      1     2     3     4     5 ...         (k = 4)
    runs      twin  twin  twin  T     twin ...

Every node makes the same calls in the same order (synchronous training), so
every node counts the same. Calls that fetch none (evaluation, a read) do not
count. Every call that trains fetches the same accumulated train ops: each
has accumulators of its own, but a job's step synchronizes all of them at
once (a parameter-server step applies every variable of the group), so a
train op fetched without the others would apply their accumulators early, or
count its calls apart from theirs. A call that fetches another set of them
raises ``SessionError`` naming both sets.
"""
from autodist.errors import SessionError

__all__ = ["MicroSteps"]


class MicroSteps:
    """The accumulation schedule of one session (see the module docstring)."""

    def __init__(self, twins, steps, prefixes):
        """``twins``: {train op: its twin} (single-device names); ``prefixes``: this node's replica prefixes."""
        self.steps = steps if twins else 1
        self._twin_of = {prefix + train: prefix + twin for train, twin in twins.items() for prefix in prefixes}
        self._train_of = {prefix + train: train for train in twins for prefix in prefixes}
        self._counts = {}

    def accumulated(self, names):
        """The names among ``names`` of train op copies that have twins (a frozenset; empty: none)."""
        if self.steps <= 1:
            return frozenset()
        return frozenset(n for n in names if n in self._twin_of)

    def next_is_micro(self, accumulated):
        """Count one call fetching ``accumulated``; whether it is a micro-step (else the update)."""
        if self._counts and accumulated not in self._counts:
            raise SessionError(self._another_set(accumulated))
        count = self._counts.get(accumulated, 0)
        self._counts[accumulated] = count + 1
        return count % self.steps != self.steps - 1

    def _another_set(self, accumulated):
        def listed(names):
            return ", ".join(sorted({self._train_of[n] for n in names}))
        return ("gradient accumulation (accumulation_steps={}): this call fetches the train ops {} where earlier "
                "calls fetched {}; the job's step synchronizes the gradients of its train ops together (under "
                "parameter servers one step applies them all), so every call that trains must fetch the same "
                "ones: fetch them together in every call, or train without accumulation_steps".format(
                    self.steps, listed(accumulated), listed(next(iter(self._counts)))))

    def twins(self, names):
        """``names`` with every accumulated train op copy replaced by its twin."""
        return [self._twin_of.get(n, n) for n in names]

    @property
    def at_update_boundary(self):
        """Whether no accumulation is under way: every train op's last call applied its update (or none ran)."""
        return all(count % self.steps == 0 for count in self._counts.values())
