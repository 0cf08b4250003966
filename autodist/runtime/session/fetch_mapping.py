"""What the user's graph elements are in this node's distributed graph: the session's fetch and feed mapping.

``autodist.runtime.session.distributed`` runs steps; this module decides what a step
runs and how values come back, by the rules in that module's docstring::

    fetch  "loss:0" (shape [None])   ->  ["replica_0/loss:0", "replica_1/loss:0"], values concatenated
    fetch  train_op                  ->  ["replica_0/train_op", "replica_1/train_op"], value None
    feed   x: array of 64 rows       ->  {"replica_0/x:0": rows 0..31, "replica_1/x:0": rows 32..63}

Kept apart from the session so that the run-plan cache (``runtime.session.run_plans``)
and ``autodist run``'s script session share it without the session's watching
and closing.
"""
import numpy as np
import tensorflow as tf

from autodist.errors import SessionError
from autodist.capture.queries import tf_variable
from autodist.kernel.walks import ancestors
from autodist.runtime.session.composites import components, composite_value

__all__ = ["FetchMapper", "flatten_fetches"]


def flatten_fetches(fetches):
    """``(leaves, pack)``: the graph elements of a fetch structure and ``pack(values)`` rebuilding it.

    Like ``tf.compat.v1.Session``: lists, tuples, namedtuples and dicts nest
    (dict keys may be anything, hooks included, and keep their order), an
    IndexedSlices or a SparseTensor is its component tensors (packed back into
    its ``...Value``); every other value is a leaf.
    """
    if components(fetches) is not None:   # IndexedSlices, SparseTensor: their components, as tf1's Session
        parts = [flatten_fetches(v) for v in components(fetches)]
        make = lambda values: composite_value(fetches, values)  # noqa: E731
    elif isinstance(fetches, dict):
        keys = list(fetches)
        parts = [flatten_fetches(fetches[k]) for k in keys]
        make = lambda values: type(fetches)(zip(keys, values))  # noqa: E731
    elif isinstance(fetches, tuple) and hasattr(fetches, "_fields"):
        parts = [flatten_fetches(v) for v in fetches]
        make = lambda values: type(fetches)(*values)  # noqa: E731
    elif isinstance(fetches, (list, tuple)):
        parts = [flatten_fetches(v) for v in fetches]
        make = type(fetches)
    else:
        return [fetches], lambda values: values[0]
    leaves, sizes = [], []
    for part_leaves, _ in parts:
        leaves.extend(part_leaves)
        sizes.append(len(part_leaves))

    def pack(values):
        out, start = [], 0
        for (_, part_pack), size in zip(parts, sizes):
            out.append(part_pack(values[start:start + size]))
            start += size
        return make(out)
    return leaves, pack


def _split_axis(shape):
    """The first unknown dimension of a static shape, or None."""
    if shape.rank is None:
        return None
    for axis, dim in enumerate(shape.as_list()):
        if dim is None:
            return axis
    return None


class FetchMapper:
    """Maps elements of the user's graph to names in this node's distributed graph."""

    def __init__(self, original_graph, dist_graph, assignment, aliases=None, train_ops=()):
        self.original = original_graph
        self.assignment = assignment
        self.aliases = dict(aliases or {})  # original tensor name -> tensor standing for it
        self._dist_ops = {op.name for op in dist_graph.get_operations()}
        self._train_ops = frozenset(train_ops)   # names of the ops apply_gradients returned
        self._trains = {}   # fetched op names -> whether they run a training op

    def trains(self, leaves):
        """Whether fetching ``leaves`` runs a training op, i.e. the call is a training step.

        The ops the fetches need are searched once per set of fetched ops.
        Without known training ops every call counts.
        """
        if not self._train_ops:
            return True
        roots = frozenset(e if isinstance(e, tf.Operation) else e.op for e in map(self.element, leaves))
        if roots not in self._trains:
            self._trains[roots] = any(op.name in self._train_ops for op in ancestors(roots))
        return self._trains[roots]

    def element(self, fetch):
        if not isinstance(fetch, (str, tf.Tensor, tf.Operation)):
            try:
                fetch = tf_variable(fetch)
            except TypeError:
                pass
        try:
            return self.original.as_graph_element(fetch)
        except (TypeError, ValueError, KeyError) as e:
            raise SessionError("cannot fetch or feed {!r}: {}".format(fetch, e)) from e

    def _copies(self, name):
        """Names of ``name`` (an op or tensor name) in this node's graph."""
        op = name.split(":")[0]
        if op in self.assignment.shared_ops:
            copies = [name]
        else:
            copies = [r.prefix + name for r in self.assignment.local]
        missing = [c for c in copies if c.split(":")[0] not in self._dist_ops]
        if missing:
            raise SessionError("'{}' does not exist in the distributed graph (its copy '{}' is missing); "
                               "fetch the tensors the graph computes instead".format(name, missing[0]))
        return copies

    def fetch(self, fetch):
        """(names to run, function of their values -> the value the user gets)."""
        element = self.element(fetch)
        if isinstance(element, tf.Operation):
            return self._copies(element.name), lambda values: None
        name = self.aliases.get(element.name, element.name)
        copies = self._copies(name)
        axis = _split_axis(element.shape)
        if len(copies) == 1 or axis is None:
            return copies[:1], lambda values: values[0]
        return copies, lambda values: np.concatenate(values, axis=axis)

    def rows(self, feed_dict):
        """This node's examples in a step: the split dimension's size of the first split feed (0: none)."""
        for key, value in (feed_dict or {}).items():
            element = self.element(key)
            axis = None if isinstance(element, tf.Operation) else _split_axis(element.shape)
            if axis is not None and np.ndim(value) > axis:
                return np.shape(value)[axis]
        return 0

    def _feed_target(self, key):
        element = self.element(key)
        if isinstance(element, tf.Operation):
            raise SessionError("cannot feed the op '{}'; feed one of its tensors".format(element.name))
        return element, self._copies(element.name), _split_axis(element.shape)

    def feed_copies(self, key):
        """``(copies, axis)``: the names ``key`` is fed to, and the axis a value is split along (or None)."""
        return self._feed_target(key)[1:]

    def feed(self, key, value):
        """{name in this node's graph: value} for one feed."""
        element, copies, axis = self._feed_target(key)
        if len(copies) == 1 or axis is None:
            return {c: value for c in copies}
        array = np.asarray(value)
        if array.ndim <= axis:
            raise SessionError("feed for '{}' has {} dimensions; its placeholder splits along dimension {}"
                               .format(element.name, array.ndim, axis))
        parts = np.array_split(array, len(copies), axis=axis)
        return dict(zip(copies, parts))
