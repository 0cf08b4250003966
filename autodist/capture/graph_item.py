"""GraphItem: a TensorFlow graph plus what distribution needs to know about it.

A GraphItem wraps a ``tf.Graph`` (or a GraphDef imported into a new one) and
records, by name, everything the planner and the kernels need and the graph
itself does not say:

- the (gradient, target variable) pairs, dense or ``tf.IndexedSlices``, and the
  op that applies each gradient to its variable;
- the optimizer that was constructed (class and constructor arguments);
- ``Info``: the variables (as ``VariableDef`` protos), table initializers and
  savers, which replace the graph's collections so that no MetaGraph is needed.

Everything is kept by *name*, so a GraphItem survives copies of its graph and
serialization. Derived views (``var_op_name_to_grad_info`` and friends) are
cached and the cache is keyed on ``graph.version`` and on the item's own
record version, so they stay correct when the graph or the records change and
nobody has to toggle a flag.

This is AutoDist's ``graph_item`` module (public path ``autodist.graph_item``):
besides GraphItem it names the default-item functions and the optimizer
decorators of ``autodist.capture.recording``, which the capture uses.
"""
import contextlib
import functools

import tensorflow as tf

from autodist.errors import GraphItemError
from autodist.capture.files import read_graph_item, write_graph_item
from autodist.capture.info import GradRecord, Info, grad_record
from autodist.capture.queries import (forward_reachable, is_update_candidate, op_name, tensor_name,
                                      variable_initializers)
# The seed's module-level API: the default item and the optimizer decorators live in
# ``recording`` (which knows nothing of GraphItem), and are AutoDist's ``graph_item`` names.
from autodist.capture.recording import (default_graph_item, get_default_graph_item,
                                        wrap_optimizer_apply_gradient, wrap_optimizer_init)

__all__ = [
    "cached_property",
    "get_default_graph_item",
    "default_graph_item",
    "wrap_optimizer_init",
    "wrap_optimizer_apply_gradient",
    "Info",
    "GradRecord",
    "GraphItem",
]


def cached_property(fn, *args, **kwargs):
    """Decorator to make a function a "cached property".

    The value is computed on first access and cached on the instance. When the
    instance defines ``_cache_key()``, the cached value is only reused while
    that key is unchanged (GraphItem keys it on the graph's version and its
    own record version), so caches never go stale.
    """
    name = fn.__name__

    @functools.wraps(fn)
    def getter(self):
        key = self._cache_key() if hasattr(self, "_cache_key") else None
        cache = self.__dict__.setdefault("_property_cache", {})
        hit = cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = fn(self, *args, **kwargs)
        cache[name] = (key, value)
        return value

    return property(getter)


class GraphItem:
    """GraphItem is a TensorFlow Graph wrapper.

    It represents the states in-between consecutive kernel graph
    transformations. Construct it with a ``tf.Graph`` or a ``GraphDef``.
    """

    def __init__(self, graph=None, graph_def=None):
        if graph is not None and graph_def is not None:
            raise ValueError("GraphItem takes a graph or a graph_def, not both")
        if graph is not None and not isinstance(graph, tf.Graph):
            raise TypeError("GraphItem(graph=...) expects a tf.Graph, got {!r}".format(type(graph).__name__))
        # A GraphDef is imported on first use of ``graph``: kernels pass GraphDef-backed
        # items along and pay for one import at the end.
        self._graph_def = graph_def
        if graph is None and graph_def is None:
            graph = tf.Graph()
        self._graph = graph
        self._records = {}  # target tensor name -> GradRecord, in insertion order
        self._train_ops = []  # names of the ops apply_gradients returned
        self._micro_steps = {}  # train op name -> names of the ops a micro-step runs besides accumulating
        self._every_step = []  # train ops never accumulated (synchronized at every micro-step)
        self.accumulation_steps = None  # Keras' own gradient_accumulation_steps, if an optimizer set it
        self._record_version = 0
        self.optimizer = None
        self.optimizer_args = ()
        self.optimizer_kwargs = {}
        self.info = Info()

    def _cache_key(self):
        return self.graph.version, self._record_version

    def _touch(self):
        self._record_version += 1

    # -- compatibility flags -------------------------------------------------------
    def set_optimize(self):
        """Start a loop of synchronizer apply.

        Kept for AutoDist compatibility. Queries are cached on the graph's
        version, so there is nothing to switch on: results never depend on
        whether this was called.
        """

    def reset_optimize(self):
        """End a loop of synchronizer apply (see ``set_optimize``)."""

    # -- variables -----------------------------------------------------------------
    def get_trainable_variables(self):
        """Variables that need to be synchronized if doing data parallelism."""
        return list(self.trainable_var_op_to_var.values())

    def get_all_variables(self):
        """All variables in this graph item, trainable or not."""
        with self.graph.as_default():
            by_name = self.info.variables_by_name(self.graph)
            return [self.info.variable_from_def(d, self.graph, by_name) for d in self.info.variables]

    @cached_property
    def trainable_var_op_to_var(self):
        """Mapping from trainable variable ops (e.g. VarHandleOps) to the Variables."""
        result = {}
        with self.graph.as_default():
            by_name = self.info.variables_by_name(self.graph)
            for var_def in self.info.trainable_variables:
                var = self.info.variable_from_def(var_def, self.graph, by_name)
                result[var.op] = var
        return result

    # -- default scope -------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self):
        """A context in which this item (and its graph) is the default."""
        with self.graph.as_default(), default_graph_item(self):
            yield self

    # -- optimizer and gradient records -------------------------------------------
    def extend_optimizer_info(self, optimizer, *args, **kwargs):
        """Record the optimizer (a class or an instance) and its constructor arguments."""
        self.optimizer = optimizer if isinstance(optimizer, type) else type(optimizer)
        self.optimizer_args = tuple(args)
        self.optimizer_kwargs = dict(kwargs)

    def extend_gradient_info(self, grads, targets, update_ops=None):
        """Add (gradient, target variable) pairs; ``update_ops`` optionally gives the applying ops."""
        grads, targets = list(grads), list(targets)
        updates = [None] * len(grads) if update_ops is None else list(update_ops)
        if not len(grads) == len(targets) == len(updates):
            raise ValueError("extend_gradient_info: {} gradients, {} targets and {} update ops must "
                             "have the same length".format(len(grads), len(targets), len(updates)))
        for grad, target, update in zip(grads, targets, updates):
            record = grad_record(grad, target, update)
            self._records[record.target] = record
        self._touch()

    def extend_train_ops(self, ops):
        """Record ops (or op names) that apply gradients: what a training step fetches."""
        for op in ops:
            name = op_name(op)
            if name not in self._train_ops:
                self._train_ops.append(name)
        self._touch()

    @property
    def train_op_names(self):
        """Names of the recorded train ops (returned by the captured ``apply_gradients`` calls)."""
        return list(self._train_ops)

    def extend_micro_step_ops(self, train_op, ops, steps):
        """Record Keras' own gradient accumulation: ``train_op`` updates every ``steps`` calls, and ``ops`` are
        what the calls in between run besides accumulating (``autodist.capture.keras_apply``)."""
        if self.accumulation_steps not in (None, steps):
            raise GraphItemError("two optimizers accumulate gradients over different numbers of steps ({} and {}); "
                                 "one job synchronizes every k steps: give them the same "
                                 "gradient_accumulation_steps".format(self.accumulation_steps, steps))
        self.accumulation_steps = steps
        self._micro_steps[op_name(train_op)] = [op_name(op) for op in ops]
        self._touch()

    @property
    def micro_step_ops(self):
        """{train op name: the op names its micro-steps run besides accumulating} (Keras' own accumulation)."""
        return {name: list(ops) for name, ops in self._micro_steps.items()}

    def mark_every_step(self, train_ops):
        """Never accumulate these train ops' gradients: they update and synchronize at every call."""
        for op in train_ops:
            name = op_name(op)
            if name not in self._every_step:
                self._every_step.append(name)
        self._touch()

    @property
    def every_step_train_ops(self):
        """Train ops that update at every call, also when the job accumulates gradients."""
        return list(self._every_step)

    def extend_gradient_info_by_names(self, grads, targets):
        """Add (gradient, target) pairs given by tensor names of this item's graph."""
        graph = self.graph
        resolved_grads = [graph.get_tensor_by_name(g) if isinstance(g, str) else g for g in grads]
        resolved_targets = [graph.get_tensor_by_name(t) if isinstance(t, str) else t for t in targets]
        self.extend_gradient_info(resolved_grads, resolved_targets)

    def add_grad_records(self, records):
        """Add ``GradRecord`` entries as they are (used by copies and deserialization)."""
        for record in records:
            self._records[record.target] = record
        self._touch()

    def pop_gradient_info(self, var_name):
        """Remove the pair whose target is ``var_name`` ("W" or "W:0"); returns its GradRecord."""
        name = tensor_name(var_name)
        if name not in self._records:
            raise KeyError("no gradient recorded for variable '{}'".format(var_name))
        record = self._records.pop(name)
        self._touch()
        return record

    def copy_gradient_info_from(self, other):
        """Copy the gradient records (and optimizer info) of another GraphItem."""
        self._records = dict(other._records)
        self._train_ops = list(other._train_ops)
        self._micro_steps = {name: list(ops) for name, ops in other._micro_steps.items()}
        self._every_step = list(other._every_step)
        self.accumulation_steps = other.accumulation_steps
        self.optimizer = other.optimizer
        self.optimizer_args = tuple(other.optimizer_args)
        self.optimizer_kwargs = dict(other.optimizer_kwargs)
        self._touch()

    @property
    def grad_records(self):
        """The gradient records, by name, in insertion order."""
        return list(self._records.values())

    # -- graph views ---------------------------------------------------------------
    @property
    def graph(self):
        """The ``tf.Graph`` associated with this GraphItem."""
        if self._graph is None:
            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(self._graph_def, name="")
            self._graph, self._graph_def = graph, None
        return self._graph

    @property
    def graph_def(self):
        """The GraphDef of this item (no import needed for GraphDef-backed items)."""
        if self._graph is None:
            return self._graph_def
        return self._graph.as_graph_def()

    def _grad_of(self, record):
        get = self.graph.get_tensor_by_name
        if record.is_sparse:
            shape = get(record.dense_shape) if record.dense_shape else None
            return tf.IndexedSlices(values=get(record.values), indices=get(record.indices),
                                    dense_shape=shape)
        return get(record.grad)

    @cached_property
    def ir(self):
        """The graph as an ``autodist.ir.IRGraph`` (rebuilt when the graph changes)."""
        from autodist.ir import from_tf_graph
        return from_tf_graph(self.graph)

    @cached_property
    def grad_target_name_pairs(self):
        """List of (gradient name, target name) pairs; sparse gradients give (indices, values) names."""
        return [((r.indices, r.values) if r.is_sparse else r.grad, r.target)
                for r in self._records.values()]

    @cached_property
    def grad_target_pairs(self):
        """List of (gradient, target tensor) pairs."""
        get = self.graph.get_tensor_by_name
        return [(self._grad_of(r), get(r.target)) for r in self._records.values()]

    @cached_property
    def all_update_ops(self):
        """Every op that writes a variable, except variable and table initializers."""
        skip = set(self.info.initializers) | self._creation_initializers()
        return [op for op in self.graph.get_operations() if is_update_candidate(op, skip)]

    def _creation_initializers(self):
        return {op.name for op in variable_initializers(self.graph)}

    @cached_property
    def var_op_name_to_grad_info(self):
        """A mapping from VarHandleOp name (e.g. "W" not "W:0") to its (grad, var, update_op) tuple."""
        initializers = set(self.info.initializers) | self._creation_initializers()
        result = {}
        get = self.graph.get_tensor_by_name
        for record in self._records.values():
            target = get(record.target)
            update = self._update_op_of(record, target, initializers)
            result[target.op.name] = (self._grad_of(record), target, update)
        return result

    @property
    def var_op_name_to_grad_info_v2(self):
        """Same answer as ``var_op_name_to_grad_info`` (kept for AutoDist compatibility).

        AutoDist's v2 relied on callers toggling ``set_optimize`` and marking
        queried variables; here both share one cache keyed on the graph version.
        """
        return self.var_op_name_to_grad_info

    def _update_op_of(self, record, target, initializers):
        if record.update_op:
            return self.graph.get_operation_by_name(record.update_op)
        candidates = [op for op in target.consumers() if is_update_candidate(op, initializers)]
        if len(candidates) > 1:
            reachable = forward_reachable(self._grad_of(record), candidates)
            candidates = [op for op in candidates if op in reachable] or candidates
        if not candidates:
            raise GraphItemError("variable '{}' has a gradient but no op applies it; build the "
                                 "train op with optimizer.apply_gradients or minimize"
                                 .format(target.op.name))
        return max(candidates, key=lambda op: op._id)

    def get_colocation_op(self, colocation_group):
        """The op a colocation group (e.g. ``b"loc:@W"``) binds to."""
        group = colocation_group.decode() if isinstance(colocation_group, bytes) else colocation_group
        if not group.startswith("loc:@"):
            raise ValueError("'{}' is not a colocation group (expected 'loc:@<op name>')".format(group))
        return self.graph.get_operation_by_name(group[len("loc:@"):])

    def get_ops_in_graph(self, op_iter):
        """The ops of this item's graph with the names of the given ops (or op names)."""
        return [self.graph.get_operation_by_name(op_name(op)) for op in op_iter]

    # -- preparation, copies and files ---------------------------------------------
    def prepare(self):
        """Fill ``info`` from the graph's variable, table-initializer and saver collections."""
        graph = self.graph
        keys = tf.compat.v1.GraphKeys
        trainable = {v.name for v in graph.get_collection(keys.TRAINABLE_VARIABLES)}
        variables = []
        for key in (keys.GLOBAL_VARIABLES, keys.LOCAL_VARIABLES):
            variables.extend(graph.get_collection(key))
        self.info.update_variables(variables, replace=True, trainable_names=trainable)
        self.info.update_table_initializers(graph.get_collection(keys.TABLE_INITIALIZERS), replace=True)
        self.info.update_savers(graph.get_collection(keys.SAVERS), replace=True)
        self._touch()
        return self

    def copy(self):
        """A new GraphItem with a copy of the graph (same names) and of every record."""
        graph_def = self.graph.as_graph_def()
        item = GraphItem(graph_def=graph_def)
        item.info = self.info.copy()
        item.copy_gradient_info_from(self)
        item.info.restore_collections(item.graph)
        return item

    def serialize(self, path):
        """Write this item to ``path`` as a ``autodist.proto.GraphItem`` message, atomically."""
        write_graph_item(self, path)

    @classmethod
    def deserialize(cls, path):
        """Read a GraphItem written by ``serialize``."""
        return read_graph_item(cls, path)

    def __repr__(self):
        return "<GraphItem: {} ops, {} gradient pairs, optimizer={}>".format(
            len(self.graph.get_operations()), len(self._records),
            getattr(self.optimizer, "__name__", None))
