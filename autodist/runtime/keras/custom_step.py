"""A model's own ``train_step`` / ``test_step`` / ``predict_step``, traced into the distributed steps.

Keras' ``fit`` calls ``model.train_step(data)`` once per batch; a subclass that
overrides it defines its own training. Under autodist each replica runs the
override on its shard (``n_r`` of the ``N`` rows of the global batch, ``R``
replicas), traced into the step ``autodist.runtime.keras.steps`` builds, and
three rules make the result the single-device one:

- **Gradients.** Every gradient the step hands to ``self.optimizer``
  (``apply_gradients`` or ``apply``) is multiplied by ``n_r * R / N`` before
  the strategy averages it over the replicas, which gives the gradient of the
  global batch when the loss the step differentiates is the mean over its rows
  (Keras' losses and ``compute_loss`` with their default reduction)::

      grad = mean_r(n_r * R / N * grad(loss_r)) = sum_r n_r / N * grad(loss_r)

- **Metrics.** What ``update_state`` adds per row (accuracy, a per-example
  ``Mean``) sums over the replicas as on one device. A scalar given to a
  ``keras.metrics.Mean`` or ``Sum`` without a sample weight (typically
  ``loss_tracker.update_state(loss)``) gets the weight ``n_r / N``, so the
  replicas together add what one device adds for the batch.
- **Logs.** The step must return values computed from metric state only (as
  ``{m.name: m.result() for m in self.metrics}`` is); ``fit`` logs them computed
  from the state of the whole job (``MetricResults``), as for the built-in step.

Where the result could not be the single-device one, ``FunctionError`` says
why: the step cannot be traced into a graph (eager-only code such as
``.numpy()``), applies no gradient through ``self.optimizer``, or returns a
value that is not computed from metric state (a batch's raw loss differs per
replica).
"""
import collections.abc
import contextlib

import tensorflow as tf

from autodist.capture.queries import source_op, tf_variable
from autodist.errors import FunctionError
from autodist.kernel.walks import ancestors

__all__ = ["overrides", "own_step", "scaled_gradients", "weighted_scalar_means", "metric_only_logs", "writes_of"]

_PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderWithDefault", "PlaceholderV2"})
_HINT = ("A custom {name} runs once per replica on its shard of the global batch, traced into a graph "
         "(docs/keras.md, \"Custom train_step\")")


def overrides(model, name):
    """True when ``model``'s class defines its own ``name`` (``train_step``, ``test_step``, ``predict_step``)."""
    import keras
    return getattr(type(model), name) is not getattr(keras.Model, name)


def own_step(model, name, x, y, sample_weight):
    """``model.<name>(data)`` traced here, with Keras' data tuple; trace failures become ``FunctionError``."""
    import keras
    data = keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
    try:
        return getattr(model, name)(data)
    except FunctionError:
        raise
    except Exception as e:
        raise FunctionError(
            "{}.{} could not be traced into autodist's graph: {}: {}. {}; write it with TensorFlow ops that "
            "work in a graph (no .numpy(), no Python branches on tensor values), as for tf.function".format(
                type(model).__name__, name, type(e).__name__, e, _HINT.format(name=name))) from e


def _scale(gradient, factor):
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


@contextlib.contextmanager
def scaled_gradients(optimizer, factor):
    """Within the block, gradients given to ``optimizer`` are multiplied by ``factor``; yields a call counter.

    ``apply_gradients`` calls ``apply``: only the outermost call scales.
    Both are instance attributes for the block only (the class is untouched).
    """
    calls = {"outer": 0, "depth": 0}
    cls = type(optimizer)

    def wrap(name, scale_args):
        def scaled(*args, **kwargs):
            if calls["depth"] == 0:
                calls["outer"] += 1
                args, kwargs = scale_args(args, kwargs)
            calls["depth"] += 1
            try:
                return getattr(cls, name)(optimizer, *args, **kwargs)
            finally:
                calls["depth"] -= 1
        return scaled

    def pairs(args, kwargs):
        given = list(args[0] if args else kwargs.pop("grads_and_vars"))
        return ([(_scale(g, factor), v) for g, v in given],) + tuple(args[1:]), kwargs

    def grads(args, kwargs):
        given = list(args[0] if args else kwargs.pop("grads"))
        return ([_scale(g, factor) for g in given],) + tuple(args[1:]), kwargs
    object.__setattr__(optimizer, "apply_gradients", wrap("apply_gradients", pairs))
    object.__setattr__(optimizer, "apply", wrap("apply", grads))
    try:
        yield calls
    finally:
        object.__delattr__(optimizer, "apply_gradients")
        object.__delattr__(optimizer, "apply")


@contextlib.contextmanager
def weighted_scalar_means(metrics, weight):
    """Within the block, a scalar given to a ``Mean``/``Sum`` metric without a sample weight gets ``weight``."""
    import keras
    plain = {keras.metrics.Mean: keras.metrics.Mean.update_state, keras.metrics.Sum: keras.metrics.Sum.update_state}
    patched = []

    def weighted(metric, original):
        def update_state(values, sample_weight=None):
            values = tf.convert_to_tensor(values)
            if sample_weight is None and values.shape.rank == 0:
                sample_weight = tf.cast(weight, values.dtype)
            return original(metric, values, sample_weight=sample_weight)
        return update_state
    for metric in metrics:
        original = next((fn for fn in plain.values() if type(metric).update_state is fn), None)
        if original is not None:
            object.__setattr__(metric, "update_state", weighted(metric, original))
            patched.append(metric)
    try:
        yield
    finally:
        for metric in patched:
            object.__delattr__(metric, "update_state")


def metric_only_logs(model, name, logs, variables):
    """``logs`` (what the step returned) as a flat dict of tensors, checked to come from metric state only."""
    if not isinstance(logs, collections.abc.Mapping):
        raise FunctionError("{}.{} returned {!r}: autodist's fit logs what it returns as a dict of metric results, "
                            "e.g. {{m.name: m.result() for m in self.metrics}}".format(
                                type(model).__name__, name, type(logs).__name__))
    handles = {tf_variable(v).handle.op for v in variables}
    flat = {}
    for key, value in _flattened(logs):
        tensor = value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)
        foreign = [op for op in ancestors([tensor.op]) if op.type in _PLACEHOLDERS or (
            op.type == "ReadVariableOp" and source_op(op.inputs[0]) not in handles)]
        if foreign:
            raise FunctionError(
                "{}.{} returns {!r}, which is computed from {} ({}), not only from metric state: every "
                "replica has its own value of it, and fit logs values of the whole global batch. Track it "
                "with a metric (e.g. a keras.metrics.Mean updated in the step) and return the metrics' "
                "results. {}".format(type(model).__name__, name, key, foreign[0].name, foreign[0].type,
                                     _HINT.format(name=name)))
        flat[key] = tensor
    return flat


def _flattened(logs):
    """(key, value) of ``logs`` with nested dicts merged in, as Keras flattens a step's logs."""
    for key, value in sorted(logs.items()):
        if isinstance(value, collections.abc.Mapping):
            yield from _flattened(value)
        else:
            yield key, value


def writes_of(updates, variables):
    """The ops among ``updates`` that write one of ``variables``."""
    handles = {tf_variable(v).handle.op for v in variables}
    return [op for op in updates if op.inputs and source_op(op.inputs[0]) in handles]

