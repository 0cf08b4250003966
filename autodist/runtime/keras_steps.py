"""The steps behind a distributed ``model.fit``: traced by ``ad.function``, equal to Keras' on the global batch.

Each replica runs Keras' own pieces (the model's call, ``_compute_loss``, the
loss tracker, ``compute_metrics``, the optimizer) on its shard of the global
batch of ``N`` rows. Two things make the result the single-device one:

- **Gradients.** Replica ``r`` holds ``n_r`` rows and differentiates
  ``loss_r * n_r * R / N``; the strategy averages gradients over the ``R``
  replicas, which gives ``sum_r n_r / N * grad(loss_r) = grad(loss)`` of the
  global batch, also for uneven shards (the last partial batch).
- **Metrics.** Keras' metric variables (totals, counts, confusion counts) are
  per replica (mirrored). Every step a replica reads what its shard added and
  zeroes them again; the additions reach a global *accumulator* per metric
  variable through the strategy's own gradient synchronization::

      delta_r = metric vars after the shard's update      (then reset to 0)
      grad(accumulator) = -delta_r * R   --average over replicas-->  -sum_r delta_r
      accumulator -= 1.0 * grad          (gradient descent, rate 1)  => += sum_r delta_r

  so the accumulators hold the metric state of the whole cluster, the same on
  every node. ``metric.result()`` is then computed locally, on this process,
  from the accumulated values (their reads are fed). Metric state must
  therefore be additive (sums and counts: every built-in metric; a custom
  ``keras.metrics.Metric`` whose ``update_state`` adds to its variables).

The step functions are plain Python functions of numpy arguments traced by
``autodist.runtime.function.DistributedFunction``: one trace per input
signature, run by the AutoDist's distributed session.
"""
import numpy as np
import tensorflow as tf

from autodist.capture.queries import ops_since, tf_variable

__all__ = ["MetricState", "MetricResults", "KerasSteps", "node_share"]


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


class MetricState:
    """One float64 accumulator per metric variable: the metric state of the whole job (module docstring).

    The accumulators are float64 so that their gradients never share a fused
    all-reduce with a model's float32 gradients (fused gradients run
    together), and so that long sums and counts stay exact.
    """

    def __init__(self):
        self.accumulators = None
        self.variables = None

    def synchronize(self, variables, replicas):
        """Add every replica's metric variables to the accumulators, then zero them; returns the sums after."""
        deltas = [tf.cast(v.read_value(), tf.float64) for v in variables]
        if self.accumulators is None:
            graph = tf.compat.v1.get_default_graph()
            with tf.init_scope(), graph.name_scope(None), graph.name_scope("autodist_metrics"):
                self.accumulators = [tf.Variable(tf.zeros(v.shape, tf.float64), name="acc_{}".format(i))
                                     for i, v in enumerate(variables)]
        grads = [-delta * tf.cast(replicas, tf.float64) for delta in deltas]
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(1.0, name="autodist_metrics")
        update = optimizer.apply_gradients(zip(grads, self.accumulators))
        with tf.control_dependencies(deltas):
            for variable in variables:
                variable.assign(tf.zeros(variable.shape, variable.dtype))
        with tf.control_dependencies([update]):
            return [tf.identity(a.read_value()) for a in self.accumulators]

    def reset(self):
        """Zero the accumulators: a write in every replica (mirrored copies and PS variables alike)."""
        for accumulator in self.accumulators or ():
            accumulator.assign(tf.zeros(accumulator.shape, accumulator.dtype))


class MetricResults:
    """``metric.result()`` of every metric as tensors whose variable reads are fed: evaluated locally."""

    def __init__(self, model, variables, graph):
        first = graph.version + 1
        self.tensors = {}
        for metric in model.metrics:
            value = metric.result()
            self.tensors.update(value if isinstance(value, dict) else {metric.name: value})
        by_handle = {v.handle.op: i for i, v in enumerate(variables)}
        self._reads = [[] for _ in variables]
        for op in ops_since(graph, first):
            if op.type == "ReadVariableOp" and op.inputs[0].op in by_handle:
                self._reads[by_handle[op.inputs[0].op]].append(op.outputs[0])
        self._dtypes = [v.dtype.as_numpy_dtype for v in variables]

    def feed(self, values):
        """The feed that makes ``tensors`` the results of the accumulated ``values`` (one per variable)."""
        return {read: np.asarray(value).astype(dtype)
                for reads, value, dtype in zip(self._reads, values, self._dtypes) for read in reads}


class KerasSteps:
    """The train, test and predict steps of one compiled model, and the global metric state's sync and reset.

    A train or test step leaves its shard's metric updates in the replica's
    metric variables; ``sync_metrics`` (its own run, right after) moves them to
    the accumulators and returns their new values.
    """

    def __init__(self, model):
        self.model = model
        self.state = MetricState()
        self.results = None      # MetricResults, built with the synchronization

    def train_step(self, x, y, sample_weight, loss_scale):
        model = self.model
        rows = _rows(x)
        with tf.GradientTape() as tape:
            y_pred = _call(model, x, training=True)
            loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            model._loss_tracker.update_state(loss, sample_weight=rows)
            scaled = loss * tf.cast(rows, loss.dtype) * tf.cast(loss_scale, loss.dtype)
            if model.optimizer is not None:
                scaled = model.optimizer.scale_loss(scaled)
        weights = model.trainable_weights
        model.optimizer.apply_gradients(zip(tape.gradient(scaled, weights), weights))
        model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def test_step(self, x, y, sample_weight):
        model = self.model
        y_pred = _call(model, x, training=False)
        loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False)
        model._loss_tracker.update_state(loss, sample_weight=_rows(x))
        model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def predict_step(self, x):
        return _call(self.model, x, training=False)

    def sync_metrics(self, replicas):
        variables = [tf_variable(v) for v in metric_variables(self.model)]
        totals = self.state.synchronize(variables, replicas)
        if self.results is None:
            self.results = MetricResults(self.model, variables, tf.compat.v1.get_default_graph())
        return totals

    def reset_metrics(self):
        self.state.reset()


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
