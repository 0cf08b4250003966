"""A Keras 3 optimizer's update in a tf1 graph: straight-line, in Keras' order, exactly as one device runs it.

Keras writes several of its options as ``keras.ops.cond``: loss scaling
(``LossScaleOptimizer`` skips the update when a gradient is not finite),
gradient accumulation (update every k-th call, else add to accumulators), the
EMA overwrite (every ``ema_overwrite_frequency`` updates). In a tf1 graph each
becomes an ``If`` op whose branches live in the function library, where the
kernels cannot see, split or synchronize the variable writes. While a captured
``apply`` runs, ``straight_line_conds`` builds both branches in the graph
itself instead and remembers which predicate guards each op; afterwards
``guard_writes`` makes every write of a branch take effect only under its
predicate::

    cond(p, lambda: v.assign_add(d), lambda: w.assign(x))
        ->  v.assign_add(where(p, d, 0))      w.assign(where(!p, x, read(w)))

(the read sees what the write would have overwritten: it runs where the write
would). Both branches run; the branch not taken writes what is there already.

Two more things a tf1 graph does not do by itself (``order_after_earlier_reads``):
an update that does not depend on the gradient (AdamW's weight decay
``v -= v * wd * lr``) could run before the forward pass reads ``v``; every
write of the update therefore waits for the reads of its variable made before
the ``apply`` call, which is the order Keras runs them in.

Gradient accumulation (``gradient_accumulation_steps=k``) is the kernel's, not
Keras': synchronizing every micro-batch would cost k times the traffic. The
captured ``apply`` is Keras' update step, fed the mean over the k micro-batches
(``straight_update``); what Keras also does on the k-1 other calls (count
``iterations``, move the EMA) becomes the train op's *micro-step* ops
(``micro_step_ops``), which the session runs instead of the update on those
calls (``autodist.kernel.accumulate``).
"""
import contextlib
import threading

import tensorflow as tf

from autodist.capture.queries import is_variable_write, ops_since, source_op, tf_variable
from autodist.errors import CaptureError

__all__ = ["straight_line_conds", "guard_writes", "order_after_earlier_reads", "check_supported",
           "accumulation_steps_of", "straight_update", "build_optimizer", "micro_step_ops"]

_local = threading.local()

# Writes a guard can make conditional, by how their value input is neutralized: (index of the value input,
# what the write leaves unchanged: "zero", "one" or "current" (the value there now)).
_GUARDABLE = {
    "AssignVariableOp": (1, "current"), "AssignAddVariableOp": (1, "zero"), "AssignSubVariableOp": (1, "zero"),
    "ResourceScatterAdd": (2, "zero"), "ResourceScatterSub": (2, "zero"), "ResourceScatterUpdate": (2, "current"),
    "ResourceScatterMul": (2, "one"), "ResourceScatterDiv": (2, "one"), "ResourceScatterMin": (2, "current"),
    "ResourceScatterMax": (2, "current"),
}
_READS = frozenset({"ReadVariableOp", "ResourceGather", "VarIsInitializedOp", "VariableShape"})


def _keras_ops():
    from keras.src import ops
    return ops


class Guards:
    """Which predicate guards each op built inside a straight-line branch (innermost first wins)."""

    def __init__(self):
        self.of_op = {}
        self.stack = []


@contextlib.contextmanager
def straight_line_conds(graph):
    """Within the block, ``keras.ops.cond`` builds both branches in ``graph``; yields the ``Guards``.

    Re-entrant (a ``LossScaleOptimizer`` applies its inner optimizer inside
    its own call): only the outermost block patches ``keras.ops.cond``, and
    restores it on exit, also after an exception.
    """
    outer = getattr(_local, "guards", None)
    if outer is not None:
        yield outer
        return
    ops = _keras_ops()
    original = ops.cond
    guards = _local.guards = Guards()

    def cond(pred, true_fn, false_fn):
        return _straight_cond(graph, guards, pred, true_fn, false_fn)
    ops.cond = cond
    try:
        yield guards
    finally:
        ops.cond = original
        _local.guards = None


def _straight_cond(graph, guards, pred, true_fn, false_fn):
    if not isinstance(pred, (tf.Tensor, tf.Variable)) and not hasattr(pred, "value"):
        return true_fn() if bool(pred) else false_fn()   # a Python condition decides now, as Keras would
    pred = tf.cast(tf.convert_to_tensor(tf_variable(pred) if hasattr(pred, "value") else pred), tf.bool)
    outer = guards.stack[-1] if guards.stack else None
    taken = pred if outer is None else tf.logical_and(outer, pred)
    other = tf.logical_not(pred) if outer is None else tf.logical_and(outer, tf.logical_not(pred))
    outputs = [_branch(graph, guards, guard, fn) for guard, fn in ((taken, true_fn), (other, false_fn))]
    return _select(pred, *outputs)


def _branch(graph, guards, guard, fn):
    first = graph.version + 1
    guards.stack.append(guard)
    try:
        result = fn()
    finally:
        guards.stack.pop()
    for op in ops_since(graph, first):
        guards.of_op.setdefault(op, guard)
    return result


def _select(pred, taken, other):
    """The cond's result: each output of the branch ``pred`` chooses (None when a branch returns nothing:
    a cond kept for its updates)."""
    if taken is None or other is None:
        return None
    try:
        tf.nest.assert_same_structure(taken, other)
    except (TypeError, ValueError) as e:
        raise CaptureError("a keras.ops.cond in the optimizer returns different structures from its branches "
                           "({}); autodist cannot build it without control flow".format(e)) from None
    return tf.nest.map_structure(lambda a, b: tf.where(pred, a, b), taken, other)


def guard_writes(graph, guards):
    """Make every write built in a branch take effect only under the branch's predicate (module docstring).

    Mutates the writes (their value input) and adds a read for a write that
    must leave the current value. Call it after the accesses were ordered: the
    read takes the write's control inputs, so it sees what the write replaces.
    """
    for op, guard in sorted(guards.of_op.items(), key=lambda item: item[0]._id):
        if not is_variable_write(op):
            if op.type not in _READS and any(t.dtype == tf.resource for t in op.inputs) and op.type != "NoOp":
                _refuse_hidden_write(op)
            continue
        if op.type not in _GUARDABLE:
            raise CaptureError("the optimizer updates a variable with '{}' ({}) inside a keras.ops.cond; autodist "
                               "builds such updates without control flow and supports {} there".format(
                                   op.name, op.type, ", ".join(sorted(_GUARDABLE))))
        index, unchanged = _GUARDABLE[op.type]
        value = op.inputs[index]
        with graph.as_default(), graph.control_dependencies(None), tf.name_scope(op.name + "/autodist_guard"):
            if unchanged == "zero":
                kept = tf.zeros_like(value)
            elif unchanged == "one":
                kept = tf.ones_like(value)
            else:
                kept = _current(op, value)
            op._update_input(index, tf.where(guard, value, kept))


def _current(write, value):
    """The value ``write`` would overwrite, read where the write runs (after its control inputs)."""
    handle = write.inputs[0]
    with tf.control_dependencies(write.control_inputs):
        if write.type == "AssignVariableOp":
            return tf.raw_ops.ReadVariableOp(resource=handle, dtype=value.dtype)
        return tf.raw_ops.ResourceGather(resource=handle, indices=write.inputs[1], dtype=value.dtype)


def _refuse_hidden_write(op):
    raise CaptureError("the optimizer passes a variable to '{}' ({}) inside a keras.ops.cond; autodist can only "
                       "see variable writes made by assign and scatter ops".format(op.name, op.type))


def order_after_earlier_reads(new_ops):
    """Make each write among ``new_ops`` (in creation order) wait for the reads of its variable made before them.

    Mutates the writes (adds control inputs). The reads of the variable's own
    creation (``<var>/Read``, ``IsInitialized``) do not count.
    """
    if not new_ops:
        return
    first_id = new_ops[0]._id
    for op in new_ops:
        if not is_variable_write(op) or not op.inputs:
            continue
        variable = source_op(op.inputs[0])
        own = variable.name + "/"
        earlier = [c for c in variable.outputs[0].consumers()
                   if c._id < first_id and c.type in _READS and c.type != "VarIsInitializedOp"
                   and not c.name.startswith(own)]
        missing = [c for c in earlier if c not in op.control_inputs]
        if missing:
            op._add_control_inputs(missing)


# -- what is supported -------------------------------------------------------------------

def _class_name(optimizer):
    return type(optimizer).__name__


def _inner_optimizers(optimizer):
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        return [inner]
    return list(getattr(optimizer, "_inner_optimizers", ()) or ())


def check_supported(optimizer):
    """Refuse, with a ``CaptureError`` naming it, a Keras optimizer whose update autodist cannot make exact."""
    name = _class_name(optimizer)
    if name == "ScheduleFreeAdamW":
        raise CaptureError("keras.optimizers.ScheduleFreeAdamW is not supported: it sets its momentum from the "
                           "weights when it builds, a write autodist cannot replay on every replica; use AdamW "
                           "with a learning-rate schedule")
    for inner in _inner_optimizers(optimizer):
        check_supported(inner)
        if inner.gradient_accumulation_steps:
            raise CaptureError("{} wraps {} with gradient_accumulation_steps={}: accumulate in autodist instead, "
                               "AutoDist(..., accumulation_steps={}), and leave the inner optimizer's option unset"
                               .format(name, _class_name(inner), inner.gradient_accumulation_steps,
                                       inner.gradient_accumulation_steps))
    if optimizer.gradient_accumulation_steps and optimizer.use_ema and optimizer.ema_overwrite_frequency:
        raise CaptureError("{}(gradient_accumulation_steps=..., use_ema=True, ema_overwrite_frequency=...) is not "
                           "supported: Keras overwrites the weights on calls that apply no update; drop "
                           "ema_overwrite_frequency and call optimizer.finalize_variable_values at the end"
                           .format(name))


def _overwrites_with_gradient(optimizer, variables):
    return [v for v in variables if getattr(v, "overwrite_with_gradient", False)]


def accumulation_steps_of(optimizer):
    """Keras' own ``gradient_accumulation_steps`` of ``optimizer`` (None: unset)."""
    return getattr(optimizer, "gradient_accumulation_steps", None) or None


@contextlib.contextmanager
def straight_update(optimizer, variables):
    """Within the block, ``optimizer``'s apply (and its inner optimizers') builds its update straight-line.

    Keras' ``_backend_apply_gradients`` compares tensors with ``==``, which in
    a tf1 graph compares the Python objects: the EMA overwrite never happens,
    and accumulation would never update. Where that matters (an
    ``ema_overwrite_frequency``, ``gradient_accumulation_steps``) the update
    is built here from Keras' own pieces: clipping, weight decay,
    ``update_step`` with ``iterations`` and the learning rate as Keras computes
    them at that call, the EMA and its overwrite (``keras.ops.cond``, built
    straight-line by ``straight_line_conds``). With accumulation the gradients
    are already the mean over the k micro-batches (the kernel accumulates), so
    there are no Keras accumulators. The optimizers' methods are restored on
    exit, also after an exception.
    """
    with contextlib.ExitStack() as stack:
        for target in [optimizer] + _inner_optimizers(optimizer):
            if accumulation_steps_of(target) or (target.use_ema and target.ema_overwrite_frequency):
                stack.enter_context(_straight_backend_apply(target, variables))
        yield


@contextlib.contextmanager
def _straight_backend_apply(optimizer, variables):
    overwritten = _overwrites_with_gradient(optimizer, variables)
    if overwritten and accumulation_steps_of(optimizer):
        raise CaptureError("{}(gradient_accumulation_steps=...) on variables with overwrite_with_gradient ({}) "
                           "is not supported".format(_class_name(optimizer), overwritten[0].path))
    saved_build = optimizer.build

    def build(var_list):
        _build_without_accumulators(optimizer, saved_build, var_list)

    def update(grads, trainable_variables):
        if accumulation_steps_of(optimizer):   # Keras adds a sparse gradient to a dense accumulator
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        grads = optimizer._clip_gradients(grads)
        optimizer._apply_weight_decay(trainable_variables)
        optimizer._backend_update_step(grads, trainable_variables, optimizer.learning_rate)
        _moving_average(optimizer)
        if optimizer.use_ema and optimizer.ema_overwrite_frequency:
            every = optimizer.ema_overwrite_frequency
            due = tf.equal(tf.math.floormod(tf.convert_to_tensor(optimizer.iterations) + 1, every), 0)
            _keras_ops().cond(due, lambda: optimizer._overwrite_model_variables_with_average_value(
                optimizer._trainable_variables), lambda: None)

    optimizer.build, optimizer._backend_apply_gradients = build, update
    try:
        yield
    finally:
        del optimizer.build, optimizer._backend_apply_gradients


def _build_without_accumulators(optimizer, build, variables):
    """``build(variables)`` without Keras' gradient accumulators: the kernel keeps its own."""
    steps = optimizer.gradient_accumulation_steps
    optimizer.gradient_accumulation_steps = None
    try:
        build(variables)
    finally:
        optimizer.gradient_accumulation_steps = steps


def build_optimizer(optimizer, variables):
    """Build a Keras optimizer for ``variables`` before the step that applies it, as Keras' ``fit`` does.

    Its state must exist when the forward pass is traced: a
    ``LossScaleOptimizer`` scales the loss by its current scale only once built
    (before, by the constant initial scale).
    """
    if optimizer is not None and not optimizer.built:
        _build_without_accumulators(optimizer, optimizer.build, variables)


def _moving_average(optimizer):
    if optimizer.use_ema:
        optimizer._update_model_variables_moving_average(optimizer._trainable_variables)


def micro_step_ops(optimizer, graph):
    """What Keras does on a call that applies no update, as ops of ``graph``: count it, move the EMA.

    Returns the writes (ordered among themselves), or [] without accumulation.
    """
    if not accumulation_steps_of(optimizer):
        return []
    first = graph.version + 1
    with graph.as_default(), graph.name_scope(None), graph.name_scope(optimizer.name + "_micro_step"):
        _moving_average(optimizer)
        optimizer._iterations.assign_add(1)
    from autodist.capture.keras import order_variable_accesses
    return order_variable_accesses(ops_since(graph, first))
