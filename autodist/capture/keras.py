"""Keras 3 inside ``AutoDist.scope()``: what works, and a clear stop for what cannot.

Keras 3 layers, models and optimizers build in the scope's graph (their
variables are ordinary graph variables) and train through the distributed
session or ``ad.function``. Keras' own training loops cannot: ``fit``,
``evaluate``, ``predict`` and the ``*_on_batch`` methods compile and run
``tf.function``s eagerly, outside any graph autodist could capture. Inside the
scope they raise ``CaptureError`` at once, pointing to ``ad.function``,
instead of failing deep inside Keras; outside the scope Keras is untouched
(the methods are restored on exit, also after an exception).

Keras 3 optimizers in a tf1 graph return the ``iterations`` variable from
``apply_gradients`` (a Session cannot fetch it), and their update ops carry no
ordering, so Adam's moment updates race with the reads that compute the
weight update::

    m.assign_add(...)          read(m) -> var.assign_sub(...)       (unordered)

``ordered_train_op`` (used by the capture's ``apply_gradients`` wrapper) orders
every access to a variable in program order (a read after the write it
follows, a write after the reads and the write before it) and returns one
fetchable train op grouping the writes.

Layers with non-trainable state update it in their forward pass: Keras 3's
``BatchNormalization`` assigns its moving mean and variance when called with
``training=True``. In a graph nothing depends on those assignments, so a
``Session.run`` of the train op skips them. ``ad.function`` runs them (as
``tf.function`` does); graph-style code collects them with
``collect_state_updates()`` and runs them with the train op::

    with collect_state_updates() as updates:
        logits = model(x, training=True)
    ...
    sess.run([train_op, updates], feed_dict)
"""
import contextlib
import functools

import tensorflow as tf

from autodist.capture.queries import is_variable_write, ops_since, source_op, variable_initializers
from autodist.errors import CaptureError

__all__ = ["guard_keras_loops", "on_compile", "collect_state_updates", "GUARDED_METHODS", "optimizer_base",
           "ordered_train_op", "order_variable_accesses"]

GUARDED_METHODS = ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")

_HINT = """Keras 3 runs model.{name}() eagerly, outside the graph autodist distributes. Write the step as a
function and let autodist trace and run it:

    @ad.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for x, y in batches:          # numpy arrays; this node's share of the data
        train_step(x, y)

(an evaluation or prediction step is a function returning model(x, training=False); see docs/keras.md)"""


def _refuse(name):
    def refuse(self, *args, **kwargs):
        raise CaptureError("model.{}() cannot run inside AutoDist.scope().\n{}".format(name, _HINT.format(name=name)))
    refuse.__name__ = name
    return refuse


def _model_class():
    try:
        import keras
    except ImportError:
        return None
    return keras.Model


@contextlib.contextmanager
def guard_keras_loops():
    """Within the block, Keras' training/evaluation loops raise ``CaptureError`` (see the module docstring)."""
    model = _model_class()
    saved = []
    try:
        if model is not None:
            for name in GUARDED_METHODS:
                had = name in model.__dict__
                saved.append((name, had, model.__dict__.get(name)))
                original = getattr(model, name, None)
                guard = _refuse(name)
                if original is not None:
                    guard = functools.wraps(original)(guard)
                guard.__autodist_guard__ = True
                setattr(model, name, guard)
        yield
    finally:
        for name, had, original in reversed(saved):
            if had:
                setattr(model, name, original)
            else:
                delattr(model, name)


@contextlib.contextmanager
def on_compile(callback):
    """Within the block, ``callback(model)`` runs after each Keras ``model.compile(...)``.

    ``AutoDist.scope()`` uses it to give a model compiled in the scope its
    distributed ``fit``/``evaluate``/``predict`` (``autodist.runtime.keras.fit``);
    ``keras.Model.compile`` is restored on exit, also after an exception.
    """
    model = _model_class()
    if model is None:
        yield
        return
    had = "compile" in model.__dict__
    saved = model.__dict__.get("compile")
    original = model.compile

    @functools.wraps(original)
    def compile_then_attach(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        callback(self)
        return result
    model.compile = compile_then_attach
    try:
        yield
    finally:
        if had:
            model.compile = saved
        else:
            del model.compile


@contextlib.contextmanager
def collect_state_updates(graph=None):
    """Yields a list that, after the block, holds the variable writes made in it (initializers excluded).

    Mutates nothing; ``graph`` defaults to the default graph.
    """
    graph = graph if graph is not None else tf.compat.v1.get_default_graph()
    first_id = graph.version + 1
    updates = []
    yield updates
    initializers = variable_initializers(graph)
    updates.extend(op for op in ops_since(graph, first_id) if is_variable_write(op) and op not in initializers)


def optimizer_base():
    """The base class of every Keras 3 optimizer."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    return BaseOptimizer


def ordered_train_op(graph, new_ops, optimizer):
    """One train op for the ops a Keras ``apply_gradients`` call made, with its accesses ordered.

    Mutates ``new_ops`` (adds control inputs, see ``order_variable_accesses``);
    the ops that create variables during the call (slots) are left alone.
    """
    created = _creation_ops(new_ops)
    writes = order_variable_accesses([op for op in new_ops if op not in created])
    with graph.as_default(), graph.name_scope(None):
        return tf.group(*writes, name=optimizer.name + "_train_op")


def _creation_ops(new_ops):
    """Ops that create variables during the call (their handle, initializer, snapshot).

    An op belongs to a new variable when one of its name scopes is the
    variable's name; each name is checked scope by scope against a set, so
    the cost stays linear in the number of ops however many slots are made.
    """
    variables = {op.name for op in new_ops if op.type in ("VarHandleOp", "VariableV2")}

    def created(op):
        parts = op.name.split("/")
        return any("/".join(parts[:i]) in variables for i in range(1, len(parts) + 1))
    return {op for op in new_ops if created(op)}


def order_variable_accesses(ops):
    """Add control edges so that accesses to each variable among ``ops`` run in list order.

    Mutates the ops (adds control inputs). Returns the write ops. Reads of a
    variable wait for the write before them; a write waits for the previous
    write and for every read since. Reads are not ordered among themselves.
    """
    last_write, reads_since, writes = {}, {}, []
    for op in ops:
        resources = {source_op(t) for t in op.inputs if t.dtype == tf.resource}
        write = is_variable_write(op)
        for res in resources:
            before = []
            if res in last_write:
                before.append(last_write[res])
            if write:
                before.extend(reads_since.get(res, ()))
            missing = [b for b in before if b is not op and b not in op.control_inputs]
            if missing:
                op._add_control_inputs(missing)
            if write:
                last_write[res] = op
                reads_since[res] = []
            else:
                reads_since.setdefault(res, []).append(op)
        if write:
            writes.append(op)
    return writes
