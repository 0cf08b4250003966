"""The steps behind a distributed ``model.fit``: traced by ``ad.function``, equal to Keras' on the global batch.

Each replica runs Keras' own pieces (the model's call, ``_compute_loss``, the
loss tracker, ``compute_metrics``, the optimizer) on its shard of the global
batch of ``N`` rows. Three things make the result the single-device one:

- **Gradients.** Replica ``r`` holds ``n_r`` rows and differentiates
  ``loss_r * n_r * R / N``; the strategy averages gradients over the ``R``
  replicas, which gives ``sum_r n_r / N * grad(loss_r) = grad(loss)`` of the
  global batch, also for uneven shards (the last partial batch).
- **Training metrics.** Keras' metric variables (totals, counts, confusion
  counts) are per replica (mirrored). In the train step, after its updates, a
  replica reads what its shard added and zeroes them again; the additions reach
  a global *accumulator* per metric variable through the strategy's own
  gradient synchronization, in the same step (the step is the graph's only
  gradient-bearing trace, as a parameter-server step requires)::

      delta_r = metric vars after the shard's update      (then reset to 0)
      grad(accumulator) = -delta_r * R   --average over replicas-->  -sum_r delta_r
      accumulator -= 1.0 * grad          (gradient descent, rate 1)  => += sum_r delta_r

  so the accumulators hold the metric state of the whole job, the same on every
  node. ``metric.result()`` is then computed locally, in this process, from
  accumulated values (its variable reads are fed: ``MetricResults``).
- **Evaluation metrics.** The test step has no gradient: each node evaluates
  every batch on its own replicas and returns each replica's additions
  (concatenated over the node's replicas); their sum is the batch's state.

A model that overrides ``train_step``, ``test_step`` or ``predict_step`` has
its own step traced instead of Keras' pieces, under the same three rules
(``autodist.runtime.keras.custom_step``: its gradients scaled, its scalar means
weighted, its logs computed from the job's metric state).

Metric state must therefore be additive (sums and counts: every built-in
metric; a custom ``keras.metrics.Metric`` whose ``update_state`` adds to its
variables). The step functions are plain Python functions of numpy arguments
traced by ``autodist.runtime.session.function.DistributedFunction``: one trace per input
signature, run by the AutoDist's distributed session.
"""
import contextlib

import numpy as np
import tensorflow as tf

from autodist.capture.keras import collect_state_updates
from autodist.capture.keras_apply import build_optimizer
from autodist.capture.recording import get_default_graph_item
from autodist.errors import FunctionError
from autodist.capture.queries import ops_since, tf_variable
from autodist.kernel.walks import ancestors
from autodist.runtime.keras.custom_step import (metric_only_logs, overrides, own_step, scaled_gradients,
                                                 weighted_scalar_means, writes_of)

__all__ = ["MetricState", "MetricResults", "KerasSteps", "metric_variables", "node_share", "uses_ema"]


def metric_variables(model):
    """Every variable of the model's metrics (the loss tracker and the compiled metrics), each once."""
    seen, found = set(), []
    for metric in model.metrics:
        for variable in metric.variables:
            if id(variable) not in seen:
                seen.add(id(variable))
                found.append(variable)
    return found


def _call(model, x, training):
    return model(x, training=training) if model._call_has_training_arg else model(x)


def _rows(x):
    return tf.shape(tf.nest.flatten(x)[0])[0]


def _take_deltas(variables, updates):
    """Each metric variable's value after ``updates`` (float64), and the ops zeroing them after that read."""
    with tf.control_dependencies(updates):
        deltas = [tf.cast(v.read_value(), tf.float64) for v in variables]
    with tf.control_dependencies(deltas):
        resets = [v.assign(tf.zeros(v.shape, v.dtype)) for v in variables]
    return deltas, resets


class MetricState:
    """One float64 accumulator per metric variable: the training metric state of the whole job.

    The accumulators are float64 so that their gradients never share a fused
    all-reduce with a model's float32 gradients, and so that long sums and
    counts stay exact.
    """

    def __init__(self):
        self.accumulators = None

    def accumulate(self, variables, updates, replicas):
        """Add every replica's metric additions (made by ``updates``) to the accumulators, then zero them."""
        deltas, _ = _take_deltas(variables, updates)
        if self.accumulators is None:
            graph = tf.compat.v1.get_default_graph()
            with tf.init_scope(), graph.name_scope(None), graph.name_scope("autodist_metrics"):
                self.accumulators = [tf.Variable(tf.zeros(v.shape, tf.float64), name="acc_{}".format(i))
                                     for i, v in enumerate(variables)]
        grads = [-delta * tf.cast(replicas, tf.float64) for delta in deltas]
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(1.0, name="autodist_metrics")
        train = optimizer.apply_gradients(zip(grads, self.accumulators))
        item = get_default_graph_item()
        if item is not None:   # every batch's logs are the job's, also while gradients accumulate
            item.mark_every_step([train])


class MetricResults:
    """Tensors computed from metric state whose variable reads are fed: evaluated locally on given state.

    ``tensors`` (by name) were built by ``ops``, among which the reads of
    ``variables``; ``feed(values)`` makes them the results of that state.
    """

    def __init__(self, tensors, variables, ops):
        self.tensors = dict(tensors)
        by_handle = {v.handle.op: i for i, v in enumerate(variables)}
        self._reads = [[] for _ in variables]
        for op in ops:
            if op.type == "ReadVariableOp" and op.inputs[0].op in by_handle:
                self._reads[by_handle[op.inputs[0].op]].append(op.outputs[0])
        self._dtypes = [v.dtype.as_numpy_dtype for v in variables]

    @classmethod
    def of_metrics(cls, model, variables, graph):
        """``metric.result()`` of every metric of ``model``, built now."""
        first = graph.version + 1
        tensors = {}
        for metric in model.metrics:
            value = metric.result()
            tensors.update(value if isinstance(value, dict) else {metric.name: value})
        return cls(tensors, variables, ops_since(graph, first))

    @classmethod
    def of_logs(cls, logs, variables):
        """The logs a custom step returned (``custom_step.metric_only_logs``)."""
        return cls(logs, variables, ancestors([t.op for t in logs.values()]))

    def feed(self, values):
        """The feed that makes ``tensors`` the results of the accumulated ``values`` (one per variable)."""
        return {read: np.asarray(value).astype(dtype)
                for reads, value, dtype in zip(self._reads, values, self._dtypes) for read in reads}


class KerasSteps:
    """The train, test and predict steps of one compiled model, and the reads of the training metric state."""

    def __init__(self, model):
        self.model = model
        self.state = MetricState()
        self.results = None      # MetricResults of the model's metrics, built by the first step traced
        self.train_results = None    # MetricResults of a custom train_step's logs (else ``results``)
        self.test_results = None     # ... of a custom test_step's logs

    def _variables(self):
        variables = [tf_variable(v) for v in metric_variables(self.model)]
        if self.results is None:
            self.results = MetricResults.of_metrics(self.model, variables, tf.compat.v1.get_default_graph())
        return variables

    def _own_step(self, name, x, y, sample_weight, scalar_weight, optimizer_scale=None):
        """The model's own ``name`` step (``custom_step``): its metric writes and checked logs."""
        model = self.model
        with contextlib.ExitStack() as stack:
            updates = stack.enter_context(collect_state_updates())
            stack.enter_context(weighted_scalar_means(model.metrics, scalar_weight))
            if optimizer_scale is not None:
                calls = stack.enter_context(scaled_gradients(model.optimizer, optimizer_scale))
            logs = own_step(model, name, x, y, sample_weight)
        variables = self._variables()    # after the step: compiled metrics are built by their first update
        if optimizer_scale is not None and not calls["outer"]:
            raise FunctionError("{}.train_step applied no gradients through self.optimizer (apply_gradients or "
                                "apply): autodist synchronizes the gradients the model's own optimizer "
                                "applies".format(type(model).__name__))
        results = MetricResults.of_logs(metric_only_logs(model, name, logs, variables), variables)
        return writes_of(updates, variables), results

    def train_step(self, x, y, sample_weight, loss_scale, replicas):
        model = self.model
        build_optimizer(model.optimizer, model.trainable_variables)
        if overrides(model, "train_step"):
            share = tf.cast(_rows(x), tf.float32) * loss_scale          # n_r * R / N
            writes, self.train_results = self._own_step("train_step", x, y, sample_weight,
                                                        share / tf.cast(replicas, tf.float32), share)
            self.state.accumulate(self._variables(), writes, replicas)
            return
        rows = _rows(x)
        with tf.GradientTape() as tape:
            with collect_state_updates() as forward:
                y_pred = _call(model, x, training=True)
                loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
                model._loss_tracker.update_state(loss, sample_weight=rows)
            scaled = loss * tf.cast(rows, loss.dtype) * tf.cast(loss_scale, loss.dtype)
            if model.optimizer is not None:
                scaled = model.optimizer.scale_loss(scaled)
        weights = model.trainable_weights
        model.optimizer.apply_gradients(zip(tape.gradient(scaled, weights), weights))
        with collect_state_updates() as metrics:
            model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        self.state.accumulate(self._variables(), forward + metrics, replicas)

    def test_step(self, x, y, sample_weight, row_share):
        """This node's replicas' metric additions for the batch, one row per replica (module docstring).

        ``row_share`` is one over the batch's rows (the weight of a custom step's scalar means per row).
        """
        model = self.model
        if overrides(model, "test_step"):
            writes, self.test_results = self._own_step("test_step", x, y, sample_weight,
                                                       tf.cast(_rows(x), tf.float32) * row_share)
            return self._addition_rows(writes)
        with collect_state_updates() as updates:
            y_pred = _call(model, x, training=False)
            loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False)
            model._loss_tracker.update_state(loss, sample_weight=_rows(x))
            model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        return self._addition_rows(updates)

    def _addition_rows(self, updates):
        deltas, _ = _take_deltas(self._variables(), updates)
        # One row per replica, its first dimension hidden from the graph: the session concatenates them.
        return [tf.compat.v1.placeholder_with_default(d[None], [None] + d.shape.as_list()) for d in deltas]

    def predict_step(self, x):
        if overrides(self.model, "predict_step"):
            return own_step(self.model, "predict_step", x, None, None)
        return _call(self.model, x, training=False)

    def read_metrics(self):
        return self.state.accumulators

    def finalize(self):
        """What Keras' ``fit`` does after its last epoch: the optimizer's final values (EMA: the averages)."""
        self.model.optimizer.finalize_variable_values(self.model.trainable_weights)


def uses_ema(optimizer):
    """Whether ``optimizer`` (or an optimizer it wraps) keeps moving averages that ``fit`` swaps in at the end."""
    inner = [getattr(optimizer, "inner_optimizer", None)] + list(getattr(optimizer, "_inner_optimizers", ()) or ())
    return bool(getattr(optimizer, "use_ema", False)) or any(uses_ema(o) for o in inner if o is not None)


def node_share(rows, assignment):
    """The indices of a global batch of ``rows`` rows that this node feeds: its replicas' equal parts.

    The batch is split over all replicas of the job in strategy order as
    ``numpy.array_split`` splits (the first ``rows % R`` parts one row longer);
    this node takes the parts of its own replicas.
    """
    bounds = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(rows), assignment.num_replicas)])
    mine = [np.arange(bounds[i], bounds[i + 1]) for i, replica in enumerate(assignment.replicas)
            if replica.local_index >= 0]
    return np.concatenate(mine) if mine else np.arange(0)
