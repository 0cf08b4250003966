"""The default GraphItem, and the seed's decorators that record optimizers into it.

AutoDist's ``graph_item`` module offers ``wrap_optimizer_init`` and
``wrap_optimizer_apply_gradient``: wrapped around an optimizer's ``__init__``
and ``apply_gradients``, they record the optimizer (class and arguments), every
(gradient, target variable) pair with the op that applies it, and the train op,
into the default GraphItem of the thread. ``autodist.capture.optimizers`` wraps
every optimizer class with them for the length of a scope; a class of one's own
can be wrapped for good::

    Plain = tf.compat.v1.train.GradientDescentOptimizer

    class Recorded(Plain):
        __init__ = wrap_optimizer_init(Plain.__init__)
        apply_gradients = wrap_optimizer_apply_gradient(Plain.apply_gradients)

    with item.as_default():
        opt = Recorded(0.1)         # item.optimizer is Recorded, item.optimizer_args == (0.1,)
        train = opt.apply_gradients(zip(grads, variables))
        # item.grad_target_pairs: (grad, variable) pairs; item.train_op_names: [train.name]

Outside a default item the wrapped methods behave exactly as the originals.
Nothing here knows the GraphItem class: recording goes through the item's
``extend_*`` methods, so ``autodist run`` can stand in one item per graph.
"""
import contextlib
import functools
import threading

import tensorflow as tf

from autodist.capture.keras import optimizer_base as keras_optimizer_base, ordered_train_op
from autodist.capture.keras_apply import (accumulation_steps_of, check_supported, guard_writes, micro_step_ops,
                                          order_after_earlier_reads, straight_line_conds, straight_update)
from autodist.capture.queries import is_variable_write, ops_since, source_op, variable_handle

__all__ = ["default_graph_item", "get_default_graph_item", "wrap_optimizer_init",
           "wrap_optimizer_apply_gradient"]

_local = threading.local()


def _stack():
    if not hasattr(_local, "items"):
        _local.items = []
    return _local.items


@contextlib.contextmanager
def default_graph_item(item):
    """Make ``item`` the default GraphItem of this thread for the block, without entering its graph.

    ``GraphItem.as_default()`` also makes the item's graph the default graph;
    this is for callers that pick graphs themselves (``autodist run`` records
    into whichever graph the script builds in).
    """
    stack = _stack()
    stack.append(item)
    try:
        yield item
    finally:
        stack.remove(item)


def get_default_graph_item():
    """The GraphItem of the innermost ``as_default()`` scope of this thread, or None."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def _outermost(kind):
    """Yields True for the outermost of nested calls of one kind in this thread."""
    level = getattr(_local, kind, 0)
    setattr(_local, kind, level + 1)
    try:
        yield level == 0
    finally:
        setattr(_local, kind, level)


def wrap_optimizer_init(fn):
    """Wrap an optimizer's ``__init__`` to record its class and arguments in the default GraphItem.

    Only the outermost constructor call is recorded (a subclass calling
    ``super().__init__`` is one construction), and only when there is a
    default GraphItem.
    """

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with _outermost("init") as outermost:
            fn(self, *args, **kwargs)
        item = get_default_graph_item()
        if outermost and item is not None:
            item.extend_optimizer_info(type(self), *args, **kwargs)

    return wrapper


def wrap_optimizer_apply_gradient(fn):
    """Wrap ``apply_gradients`` (or Keras' ``apply``) to record gradients, update ops and the train op.

    Works for ``tf.compat.v1.train`` optimizers and Keras 3 optimizers; for
    Keras the call returns one fetchable train op with the variable accesses
    ordered (``autodist.capture.keras.ordered_train_op``). Recording happens
    for the outermost call only, in a tf1 graph (not while a ``tf.function``
    is traced), when there is a default GraphItem.
    """

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        item = get_default_graph_item()
        with _outermost("apply") as outermost:
            if not outermost or item is None or not _in_tf1_graph():
                return fn(self, *args, **kwargs)
            return _apply_and_record(item, fn, self, args, kwargs)

    return wrapper


def _in_tf1_graph():
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    return not getattr(graph, "building_function", False)


def _split_call(fn_name, args, kwargs):
    """Normalize the call into (grads, variables, rebuild(args, kwargs)) for both APIs."""
    if fn_name == "apply":  # Keras: apply(grads, trainable_variables=None)
        grads = list(args[0] if args else kwargs.pop("grads"))
        variables = args[1] if len(args) > 1 else kwargs.pop("trainable_variables", None)
        variables = None if variables is None else list(variables)
        return grads, variables, lambda: ((grads, variables), kwargs)
    pairs = list(args[0] if args else kwargs.pop("grads_and_vars"))
    rest = args[1:]
    grads = [g for g, _ in pairs]
    variables = [v for _, v in pairs]
    return grads, variables, lambda: ((pairs,) + tuple(rest), kwargs)


def _apply_and_record(item, fn, optimizer, args, kwargs):
    """Call ``fn``, then record in ``item`` what it made; returns the (Keras: ordered) train op."""
    grads, variables, rebuild = _split_call(fn.__name__, args, dict(kwargs))
    call_args, call_kwargs = rebuild()
    graph = tf.compat.v1.get_default_graph()
    first_id = graph.version + 1
    if isinstance(optimizer, keras_optimizer_base()):
        result, new_ops, micro = _keras_apply(graph, fn, optimizer, variables, call_args, call_kwargs)
        if variables is None:  # Keras apply() with the variables it was built with
            variables = list(optimizer._trainable_variables)
    else:
        result, micro = fn(optimizer, *call_args, **call_kwargs), []
        new_ops = ops_since(graph, first_id)
    _record_pairs(item, grads, variables, new_ops)
    train = result.op if isinstance(result, tf.Tensor) else result
    if isinstance(train, tf.Operation):
        item.extend_train_ops([train])
        steps = accumulation_steps_of(optimizer) if isinstance(optimizer, keras_optimizer_base()) else None
        if steps:
            item.extend_micro_step_ops(train, micro, steps)
    if item.optimizer is None:
        item.extend_optimizer_info(type(optimizer))
    return result


def _keras_apply(graph, fn, optimizer, variables, call_args, call_kwargs):
    """A Keras ``apply`` built straight-line and ordered (``capture.keras_apply``): (train op, new ops, micro ops)."""
    check_supported(optimizer)
    first_id = graph.version + 1
    with straight_line_conds(graph) as guards, straight_update(optimizer, variables or ()):
        fn(optimizer, *call_args, **call_kwargs)
    new_ops = ops_since(graph, first_id)
    order_after_earlier_reads(new_ops)
    result = ordered_train_op(graph, new_ops, optimizer)
    guard_writes(graph, guards)
    return result, new_ops, micro_step_ops(optimizer, graph)


def _record_pairs(item, grads, variables, new_ops):
    """Record each (gradient, variable) pair with the last of ``new_ops`` that writes the variable."""
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    writes = {}
    for op in new_ops:
        if is_variable_write(op) and op.inputs:
            writes[source_op(op.inputs[0])] = op  # the last write wins
    updates = [writes.get(variable_handle(v).op) for _, v in pairs]
    item.extend_gradient_info([g for g, _ in pairs], [v for _, v in pairs], updates)
