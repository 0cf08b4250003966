"""``AutoDist.function``: TF2-style step functions run by the distributed session.

    ad = AutoDist("resource_specs/loopback_two_nodes.yml", AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model = keras.Sequential([...])
        optimizer = keras.optimizers.Adam(1e-3)

    @ad.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss                      # per example: shape [batch]

    for x, y in my_batches:              # numpy arrays
        losses = train_step(x, y)

Tracing. The first call with a new *signature* builds the function into the
AutoDist's graph, inside its scope: every numpy argument becomes a placeholder
of its dtype whose first dimension is unknown (the batch: the session splits
it across this node's replicas); a 0-d array becomes a scalar placeholder fed
to every replica; Python scalars, strings and None are constants of the trace.
The signature, and so the cache key, is the function plus, per argument, the
dtype and the shape without the first dimension (a smaller last batch reuses
the trace), or the constant's value.

Running. Later calls only feed and run. A call fetches the function's outputs
(tensors with an unknown first dimension concatenated over the replicas,
others from this node's first replica, as the session does), the train ops
that ``apply_gradients`` recorded during the trace, and the variable writes
and prints of the trace nothing else depends on (Keras' batch-norm moving
statistics, ``v.assign_add``), as ``tf.function`` would run them.

Several functions. All functions of an AutoDist share its graph and its one
current session. A trace made after the session exists grows the graph; when a
call needs ops the session does not have (``GraphChangedError``), autodist
opens a session for the grown graph on the same job
(``autodist.runtime.job.Job.reopen``) and moves every variable's value over
from the old one (the chief's values, broadcast to every replica). Each node must make
the same calls in the same order, which running the same script gives.
"""
import functools
import re
import types
import weakref

import numpy as np
import tensorflow as tf

from autodist.errors import FunctionError, GraphChangedError
from autodist.kernel.walks import ancestors
from autodist.capture.queries import is_variable_write, ops_since, variable_initializers

__all__ = ["DistributedFunction", "state_specs"]

_traces = weakref.WeakKeyDictionary()   # AutoDist -> {(fn, signature): _Trace}
_PRINT_OPS = frozenset({"PrintV2", "Print"})
_STATIC = (bool, int, float, str, bytes, type(None))


def _leaf_signature(leaf):
    """(kind, hashable description) of one argument leaf."""
    if isinstance(leaf, (np.ndarray, np.generic)):
        array = np.asarray(leaf)
        if array.dtype == object:
            raise FunctionError("numpy arguments need a numeric or string dtype, got an object array")
        return "array", (array.dtype.str, array.shape[1:] if array.ndim else None)
    if isinstance(leaf, _STATIC):
        return "static", (type(leaf).__name__, leaf)
    if isinstance(leaf, tf.Tensor):
        return "tensor", (leaf.name,)
    raise FunctionError("ad.function arguments are numpy arrays, Python scalars, strings or None (or "
                        "nests of them); got {!r}".format(type(leaf).__name__))


def callable_name(fn):
    """The name a callable is known by in messages: ``__name__``, else its type's (a partial, an object)."""
    return getattr(fn, "__name__", None) or type(fn).__name__


def scope_name(name):
    """``name`` as a valid root name scope: ``<lambda>`` -> ``lambda``, ``_step`` -> ``step``.

    TensorFlow refuses root scopes that start with ``_`` or contain ``<``;
    any Python callable may be an ``ad.function``, so its name is cleaned.
    """
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "", name).lstrip("_-")
    return cleaned or "function"


class _Instance:
    """The object a method is bound to, as part of a cache key: equal only to itself (``is``).

    Instances may define ``__eq__`` or be unhashable; two instances of one
    class are distinct (each has its own variables), so identity is the key.
    """

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Instance) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)


def signature(args, kwargs):
    """The cache key of a call (without the function): structure and per-leaf signatures."""
    structure = tf.nest.map_structure(lambda _: 0, (args, kwargs))
    leaves = tf.nest.flatten((args, kwargs))
    return repr(structure), tuple(_leaf_signature(leaf) for leaf in leaves)


class _Trace:
    """One traced signature: its placeholders, its outputs and the ops each call runs."""

    def __init__(self, ad, fn, args, kwargs):
        self.name = callable_name(fn)
        graph = ad.graph_item.graph if ad.graph_item is not None else tf.Graph()
        with graph.as_default(), ad.scope():
            item = ad.graph_item
            first_id = graph.version + 1
            trained = set(item.train_op_names)
            records = {r.target: r for r in item.grad_records}
            with tf.name_scope(scope_name(self.name)):
                call_args, call_kwargs, self.feeds = self._placeholders(args, kwargs)
            self.structure = fn(*call_args, **call_kwargs)
            self.leaves, self.fetches = self._fetchable(self.structure)
            retrained = sorted(r.target for r in item.grad_records if r.target in records and r != records[r.target])
            if retrained:
                # The first trace keeps training these variables; the rejected trace's ops stay unused.
                item.add_grad_records(records[target] for target in retrained)
                raise FunctionError(
                    "'{}' applies gradients to {} again in a new trace; a variable can be trained by one trace "
                    "only (keep the argument shapes of a training function fixed, e.g. pad the last batch)"
                    .format(self.name, retrained))
            new_ops = ops_since(graph, first_id)
            train_ops = [graph.get_operation_by_name(n) for n in item.train_op_names if n not in trained]
            roots = [f if isinstance(f, tf.Operation) else f.op for f in self.fetches] + train_ops
            micro = {name for ops in item.micro_step_ops.values() for name in ops}   # run by the micro-steps
            self.run_ops = train_ops + [op for op in self._dangling(graph, new_ops, roots) if op.name not in micro]

    @staticmethod
    def _placeholders(args, kwargs):
        leaves = tf.nest.flatten((args, kwargs))
        replaced, feeds = [], []
        for index, leaf in enumerate(leaves):
            kind, _ = _leaf_signature(leaf)
            if kind != "array":
                replaced.append(leaf)
                continue
            array = np.asarray(leaf)
            shape = [None] + list(array.shape[1:]) if array.ndim else []
            holder = tf.compat.v1.placeholder(tf.as_dtype(array.dtype), shape, name="arg_{}".format(index))
            replaced.append(holder)
            feeds.append((index, holder))
        call_args, call_kwargs = tf.nest.pack_sequence_as((args, kwargs), replaced)
        return call_args, call_kwargs, feeds

    @staticmethod
    def _fetchable(structure):
        """(per output leaf: the index of its fetch or None, the fetches): graph elements are fetched."""
        from autodist.capture.queries import tf_variable
        leaves, fetches = [], []
        for leaf in tf.nest.flatten(structure):
            element = leaf
            if not isinstance(leaf, (tf.Tensor, tf.Operation)):
                try:
                    element = tf_variable(leaf)
                except TypeError:
                    leaves.append(None)
                    continue
            leaves.append(len(fetches))
            fetches.append(element)
        return leaves, fetches

    @staticmethod
    def _dangling(graph, new_ops, roots):
        """Variable writes and prints made by the trace that nothing fetched depends on."""
        reached = ancestors(roots)
        initializers = variable_initializers(graph)
        return [op for op in new_ops if (is_variable_write(op) or op.type in _PRINT_OPS)
                and op not in reached and op not in initializers]

    def run(self, ad, job, args, kwargs):
        leaves = tf.nest.flatten((args, kwargs))
        feed_dict = {holder: np.asarray(leaves[index]) for index, holder in self.feeds}
        values, _ = _run(ad, job, (self.fetches, self.run_ops), feed_dict)
        outputs = tf.nest.flatten(self.structure)
        results = [outputs[i] if fetch is None else values[fetch] for i, fetch in enumerate(self.leaves)]
        return tf.nest.pack_sequence_as(self.structure, results)


def _run(ad, job, fetches, feed_dict):
    """Run on the AutoDist's current session; after a trace grew the graph, on a new one."""
    session = job.session
    if session is None:
        if not ad.graph_item.grad_records:
            raise FunctionError("the first call autodist runs needs a training step in the graph (a distributed "
                                "session distributes gradients): trace it first without running it, e.g. "
                                "train_step.trace(x_example, y_example), or call it first")
        session = ad.create_distributed_session()
    try:
        return session.run(fetches, feed_dict)
    except GraphChangedError:
        session = _next_session(ad, job, session)
        return session.run(fetches, feed_dict)


def state_specs(graph, session):
    """``VariableSpec`` by key (op name) of every variable of ``graph`` (global and local) ``session`` holds."""
    from autodist.checkpoint.layout import original_names, specs_of
    names = original_names(session.transform_result)
    keys = (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
    return specs_of({v.op.name: v for key in keys for v in graph.get_collection(key) if v.op.name in names})


def _next_session(ad, job, old):
    """A session for the grown graph holding the old session's variable values."""
    from autodist.checkpoint.binding import load_state, read_state
    specs = state_specs(ad.graph_item.graph, old)
    values = read_state(old, specs) if old.transform_result.assignment.node.is_chief else None
    new = job.reopen(ad.graph_item)
    load_state(new, specs, values)
    old.close()
    return new


class DistributedFunction:
    """``fn`` traced into the AutoDist's graph on first call per signature, then run by its session.

    ``job`` is the AutoDist's ``autodist.runtime.job.Job``: the session to run on, and reopened
    when a trace grew the graph.
    """

    def __init__(self, autodist, fn, job, _key=None):
        binding = type(fn) if isinstance(fn, (staticmethod, classmethod)) else None
        fn = fn.__func__ if binding is not None else fn
        if not callable(fn):
            raise FunctionError("AutoDist.function expects a callable, got {!r}".format(type(fn).__name__))
        functools.update_wrapper(self, fn)
        self._autodist = autodist
        self._job = job
        self._fn = fn
        self._binding = binding
        self._key = fn if _key is None else _key   # traces are cached under (key, signature)

    def __get__(self, instance, owner=None):
        """Bind like the function it decorates: ``model.train_fn(batch)`` passes ``model`` as ``self``.

        Each instance has its own traces (its own variables); ``@staticmethod``
        is not bound and ``@classmethod`` is bound to the class.
        """
        target = owner if self._binding is classmethod else instance
        if target is None or self._binding is staticmethod or self._key is not self._fn:
            return self
        return DistributedFunction(self._autodist, types.MethodType(self._fn, target), self._job,
                                   _key=(self._fn, _Instance(target)))

    def trace(self, *args, **kwargs):
        """Build the trace for these arguments now, if this signature is new, without running it."""
        traces = _traces.setdefault(self._autodist, {})
        key = (self._key, signature(args, kwargs))
        trace = traces.get(key)
        if trace is None:
            trace = traces[key] = _Trace(self._autodist, self._fn, args, kwargs)
        return trace

    @property
    def traces(self):
        """Number of signatures traced for this function (for a bound method: for its instance)."""
        return sum(1 for key, _ in _traces.get(self._autodist, {}) if key == self._key)

    def __call__(self, *args, **kwargs):
        return self.trace(*args, **kwargs).run(self._autodist, self._job, args, kwargs)
