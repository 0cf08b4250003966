"""Conversions and small helpers shared by every graph_editor module.

The public entry points of the editor accept "anything convertible": one op,
one tensor, a list of them, a graph, a SubGraphView. The ``make_list_of_*``
functions below are where that normalisation happens, so every other module
can work on plain Python lists of ``tf.Operation`` / ``tf.Tensor``.
"""
import collections.abc
import contextlib
import functools
import re

import tensorflow as tf

from autodist.graph_editor._library import library_closure

__all__ = [
    "make_list_of_op",
    "get_tensors",
    "make_list_of_t",
    "get_generating_ops",
    "get_consuming_ops",
    "ControlOutputs",
    "placeholder_name",
    "make_placeholder_from_tensor",
    "make_placeholder_from_dtype_and_shape",
    "library_closure",   # the library functions some nodes call, transitively (control flow, tf.function)
]

# Prefix of every placeholder the editor creates ("graph editor placeholder").
_DEFAULT_PLACEHOLDER_PREFIX = "geph"


class ListView(collections.abc.Sequence):
    """Read-only view of a list, used for the tensors and ops of a view.

    ``view + [x]`` and ``[x] + view`` give plain lists, so callers can build
    new selections from a view without copying it by hand.
    """

    __slots__ = ("_items",)

    def __init__(self, items):
        if not isinstance(items, list):
            raise TypeError("ListView wraps a list, got {}".format(type(items).__name__))
        self._items = items

    def __getitem__(self, index):
        return self._items[index]

    def __len__(self):
        return len(self._items)

    def __add__(self, other):
        return list(self._items) + list(other)

    def __radd__(self, other):
        return list(other) + list(self._items)

    def __eq__(self, other):
        if isinstance(other, (ListView, list, tuple)):
            return len(self) == len(other) and all(a is b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return "ListView({!r})".format(self._items)


def concatenate_unique(la, lb):
    """Append to list ``la`` the items of ``lb`` it does not hold yet (mutates ``la``)."""
    seen = set(la)
    for item in lb:
        if item not in seen:
            seen.add(item)
            la.append(item)
    return la


def is_iterable(obj):
    """True for containers; tensors and strings count as single items."""
    if isinstance(obj, (tf.Tensor, str, bytes)):
        return False
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def flatten_tree(tree, leaves=None):
    """Leaves of a nested structure of lists, tuples, sets and dict values."""
    if leaves is None:
        leaves = []
    if isinstance(tree, dict):
        for value in tree.values():
            flatten_tree(value, leaves)
    elif is_iterable(tree):
        for item in tree:
            flatten_tree(item, leaves)
    else:
        leaves.append(tree)
    return leaves


def transform_tree(tree, fn, iterable_type=tuple):
    """Apply ``fn`` to every leaf, keeping the shape of ``tree``.

    Dicts keep their keys, lists/tuples/sets (and namedtuples) their type;
    other iterables become ``iterable_type``.
    """
    if isinstance(tree, dict):
        return type(tree)((key, transform_tree(value, fn, iterable_type))
                          for key, value in tree.items())
    if not is_iterable(tree):
        return fn(tree)
    items = [transform_tree(item, fn, iterable_type) for item in tree]
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*items)
    if isinstance(tree, (list, tuple, set, frozenset)):
        return type(tree)(items)
    return iterable_type(items)


def _describe(obj):
    name = getattr(obj, "name", None)
    return "{} '{}'".format(type(obj).__name__, name) if name else repr(obj)


def get_unique_graph(tops, check_types=None, none_if_empty=False):
    """Return the one graph all of ``tops`` (ops and/or tensors) belong to.

    Raises:
      TypeError: an element is not of ``check_types`` (default: op or tensor).
      ValueError: the elements come from several graphs, or ``tops`` is empty
        and ``none_if_empty`` is False.
    """
    if isinstance(tops, tf.Graph):
        return tops
    if not is_iterable(tops):
        tops = [tops]
    types = check_types or (tf.Operation, tf.Tensor)
    if not isinstance(types, tuple):
        types = (types,)
    graph = None
    for top in tops:
        if not isinstance(top, types):
            raise TypeError("expected {}, got {}".format(
                " or ".join("tf." + t.__name__ for t in types), _describe(top)))
        if graph is None:
            graph = top.graph
        elif top.graph is not graph:
            raise ValueError("{} belongs to another graph than the first element".format(
                _describe(top)))
    if graph is None and not none_if_empty:
        raise ValueError("cannot find the graph of an empty list")
    return graph


def check_graphs(*args):
    """Raise ValueError unless every argument with a ``graph`` shares one graph."""
    graph = None
    for arg in args:
        arg_graph = getattr(arg, "graph", None)
        if arg_graph is None:
            continue
        if graph is None:
            graph = arg_graph
        elif arg_graph is not graph:
            raise ValueError("{} is not in the same graph as the other arguments".format(
                _describe(arg)))


def _as_list(items, allow_graph, graph_fn):
    if isinstance(items, tf.Graph):
        if not allow_graph:
            raise TypeError("a tf.Graph is not accepted here (allow_graph=False)")
        return graph_fn(items), True
    if not is_iterable(items):
        return [items], False
    return list(items), False


def make_list_of_op(ops, check_graph=True, allow_graph=True, ignore_ts=False):
    """Convert ``ops`` (an op, a list, a graph, a SubGraphView) to a list of ops.

    Raises:
      TypeError: an element is not an op (tensors are dropped silently when
        ``ignore_ts``), or a graph is given with ``allow_graph=False``.
      ValueError: the ops come from several graphs.
    """
    if hasattr(ops, "ops") and hasattr(ops, "passthroughs"):  # a SubGraphView
        return list(ops.ops)
    items, from_graph = _as_list(ops, allow_graph, lambda g: g.get_operations())
    if from_graph or not items:
        return items
    if check_graph:
        get_unique_graph(items, check_types=None if ignore_ts else tf.Operation)
    elif not ignore_ts:
        for item in items:
            if not isinstance(item, tf.Operation):
                raise TypeError("expected tf.Operation, got {}".format(_describe(item)))
    return [op for op in items if isinstance(op, tf.Operation)]


def get_tensors(graph):
    """All the output tensors of all the ops of ``graph``, in creation order."""
    if not isinstance(graph, tf.Graph):
        raise TypeError("expected a tf.Graph, got {}".format(type(graph).__name__))
    return [t for op in graph.get_operations() for t in op.outputs]


def make_list_of_t(ts, check_graph=True, allow_graph=True, ignore_ops=False):
    """Convert ``ts`` (a tensor, a list, a graph) to a list of tensors.

    Raises:
      TypeError: an element is not a tensor (ops are dropped silently when
        ``ignore_ops``), a graph is given with ``allow_graph=False``, or a
        SubGraphView is given (ambiguous: pass ``sgv.inputs`` or ``sgv.outputs``).
      ValueError: the tensors come from several graphs.
    """
    if hasattr(ts, "ops") and hasattr(ts, "passthroughs"):
        raise TypeError("a SubGraphView is not a list of tensors; pass its .inputs or .outputs")
    items, from_graph = _as_list(ts, allow_graph, get_tensors)
    if from_graph or not items:
        return items
    if check_graph:
        get_unique_graph(items, check_types=None if ignore_ops else tf.Tensor)
    elif not ignore_ops:
        for item in items:
            if not isinstance(item, tf.Tensor):
                raise TypeError("expected tf.Tensor, got {}".format(_describe(item)))
    return [t for t in items if isinstance(t, tf.Tensor)]


def get_generating_ops(ts):
    """The op producing each tensor of ``ts`` (one entry per tensor)."""
    return [t.op for t in make_list_of_t(ts, allow_graph=False)]


def get_consuming_ops(ts):
    """Every op consuming at least one tensor of ``ts``, without duplicates."""
    ts = make_list_of_t(ts, allow_graph=False)
    return concatenate_unique([], (op for t in ts for op in t.consumers()))


class ControlOutputs:
    """Reverse index of control edges: op -> ops that have it as control input.

    TensorFlow only stores control *inputs*. This is a snapshot of the graph
    when it is built; ``update()`` rebuilds it if ops were added since (it is
    keyed on ``graph.version``). Rewiring control edges of existing ops does not
    change ``graph.version``: the editing functions that do so refresh the
    instance they are given, otherwise call ``update(force=True)``.
    """

    def __init__(self, graph):
        if not isinstance(graph, tf.Graph):
            raise TypeError("expected a tf.Graph, got {}".format(type(graph).__name__))
        self._graph = graph
        self._version = None
        self._control_outputs = {}
        self.update()

    def update(self, force=False):
        """Rebuild the index if the graph grew (or always with ``force``); returns self."""
        if force or self._version != self._graph.version:
            index = {}
            for op in self._graph.get_operations():
                for control_input in op.control_inputs:
                    index.setdefault(control_input, []).append(op)
            self._control_outputs = index
            self._version = self._graph.version
        return self

    def get_all(self):
        return self._control_outputs

    def get(self, op):
        """The ops having ``op`` as a control input (empty tuple if none)."""
        return tuple(self._control_outputs.get(op, ()))

    @property
    def graph(self):
        return self._graph


def scope_finalize(scope):
    """``"a/b"`` -> ``"a/b/"``; the empty scope stays empty."""
    if scope and not scope.endswith("/"):
        scope += "/"
    return scope


def scope_dirname(scope):
    """``"a/b/c"`` -> ``"a/b/"``; a name without ``/`` -> ``""``."""
    slash = scope.rfind("/")
    return "" if slash < 0 else scope[:slash + 1]


def scope_basename(scope):
    """``"a/b/c"`` -> ``"c"``."""
    return scope[scope.rfind("/") + 1:]


def placeholder_name(t=None, scope=None, prefix=_DEFAULT_PLACEHOLDER_PREFIX):
    """Name for a placeholder standing for ``t``.

    ``t`` = tensor ``"a/b:1"`` gives ``"a/geph__b_1"`` (``scope`` replaces the
    ``"a/"`` directory); a name that already is such a placeholder is reused.
    Without ``t`` the name is ``scope + prefix``.

    Raises:
      TypeError: ``t`` is not None and not a tf.Tensor.
    """
    if scope is not None:
        scope = scope_finalize(scope)
    if t is None:
        return (scope or "") + prefix
    if not isinstance(t, tf.Tensor):
        raise TypeError("placeholder_name expects a tf.Tensor, got {}".format(_describe(t)))
    op_dirname = scope_dirname(t.op.name)
    op_basename = scope_basename(t.op.name)
    if scope is None:
        scope = op_dirname
    marker = "{}__".format(prefix)
    if op_basename.startswith(marker):
        return scope + op_basename
    return "{}{}{}_{}".format(scope, marker, op_basename, t.value_index)


def make_placeholder_from_tensor(t, scope=None, prefix=_DEFAULT_PLACEHOLDER_PREFIX):
    """Create, in the *default* graph, a placeholder with ``t``'s dtype and shape.

    The caller chooses the graph (``with graph.as_default():``); the current
    name scope applies, as for any ``tf.compat.v1.placeholder``.
    Mutates the default graph (adds one op).
    """
    return tf.compat.v1.placeholder(
        dtype=t.dtype, shape=t.get_shape(), name=placeholder_name(t, scope=scope, prefix=prefix))


def make_placeholder_from_dtype_and_shape(dtype, shape=None, scope=None,
                                          prefix=_DEFAULT_PLACEHOLDER_PREFIX):
    """Create, in the default graph, a placeholder named ``scope + prefix``.

    Mutates the default graph (adds one op).
    """
    return tf.compat.v1.placeholder(
        dtype=dtype, shape=shape, name=placeholder_name(scope=scope, prefix=prefix))


@contextlib.contextmanager
def clean_graph_context(graph):
    """Make ``graph`` the default graph with none of the caller's scopes leaking in.

    Inside, ops are created at the root name scope with no device function,
    colocation or control dependency from the caller's context: the editor
    always names and places what it creates explicitly.
    """
    with graph.as_default(), graph.name_scope(None), graph.device(None), \
            graph.colocate_with(None, ignore_existing=True), graph.control_dependencies(None):
        yield graph


@functools.lru_cache(maxsize=None)
def get_predefined_collection_names():
    """The collection names of ``tf.compat.v1.GraphKeys`` (never renamed by copies)."""
    # vars() rather than getattr(): the deprecated VARIABLES alias warns on access.
    return frozenset(value for key, value in vars(tf.compat.v1.GraphKeys).items()
                     if re.match(r"^[A-Z][A-Z0-9_]*$", key) and isinstance(value, str))


def find_corresponding_elem(target, dst_graph, dst_scope="", src_scope=""):
    """The op/tensor of ``dst_graph`` whose name is ``target``'s, moved to ``dst_scope``.

    Raises:
      TypeError: ``target`` is neither an op nor a tensor.
      ValueError: ``target``'s name is not under ``src_scope``.
      KeyError: ``dst_graph`` has no such element.
    """
    if not isinstance(target, (tf.Operation, tf.Tensor)):
        raise TypeError("expected tf.Operation or tf.Tensor, got {}".format(_describe(target)))
    src_scope = scope_finalize(src_scope)
    if not target.name.startswith(src_scope):
        raise ValueError("{} is not under the source scope '{}'".format(
            _describe(target), src_scope))
    name = scope_finalize(dst_scope) + target.name[len(src_scope):]
    if isinstance(target, tf.Tensor):
        return dst_graph.get_tensor_by_name(name)
    return dst_graph.get_operation_by_name(name)


def find_corresponding(targets, dst_graph, dst_scope="", src_scope=""):
    """``find_corresponding_elem`` over a nested structure, keeping its shape."""
    return transform_tree(
        targets, lambda t: find_corresponding_elem(t, dst_graph, dst_scope, src_scope))
