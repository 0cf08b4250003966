"""``model.fit``, ``evaluate`` and ``predict`` of a Keras model compiled in ``AutoDist.scope()``, distributed.

    ad = AutoDist("resource_specs/loopback_two_nodes.yml", AllReduce())     # line 1
    with tf.Graph().as_default(), ad.scope():                               # line 2
        model = keras.Sequential([...])                                     # line 3: indented
        model.compile(optimizer="adam", loss="...", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=5, validation_data=(xv, yv), callbacks=[...])
    model.evaluate(xt, yt); model.predict(xt)

``compile`` inside the scope gives the model its own ``fit``, ``evaluate`` and
``predict`` (instance attributes: Keras' classes stay untouched). They drive
the epochs and batches here, with Keras' ``CallbackList`` and ``History``, and
run the steps of ``autodist.runtime.keras.steps`` through ``ad.function``:

- **Batches** (``autodist.runtime.keras.data``). ``batch_size`` is the global
  batch. Arrays are cut into global batches (shuffled per epoch with a seed
  every node shares, or in order with ``shuffle=False``), the last one partial
  as in Keras; a ``tf.data.Dataset`` or a ``keras.utils.PyDataset`` yields
  global batches (a dataset is iterated eagerly, so ``fit`` runs outside the
  ``with tf.Graph().as_default()`` block). ``class_weight``, ``steps_per_epoch``,
  ``validation_steps`` and ``steps`` deal and weigh the batches as Keras does;
  what Keras refuses (``validation_split`` on a dataset...) and what could not
  run as on one device (a Python generator) raise ``ArgumentError``. In ``fit`` each node feeds its
  replicas' rows of every batch (``steps.node_share``), so an epoch visits
  each example once across the cluster. ``evaluate`` and ``predict`` feed every
  batch whole to each node's own replicas (no step synchronizes, nodes need not
  wait for each other), so every node holds every result.
- **Logs.** After each training step the job's accumulated metric state is read
  and the metrics' results are computed from it (``steps``); evaluation
  sums its replicas' additions. Every node holds the logs of the whole job,
  equal to the single-device run's.
- **Callbacks** run on every node on those same logs, so every node takes the
  same decisions (``EarlyStopping``, ``model.stop_training``) and stays in step;
  the progress bar is the chief's only. The model's weights and learning rate
  they read and set go through the session (``state``; checkpoints are
  written by the chief). As with Keras' multi-worker training, other callbacks
  that write files write on every node.
- The first call traces every step (train, test, predict) before the session
  opens, so later calls (``fit`` again, ``evaluate``, ``predict``) reuse it.
  The training step is traced once per model: a later ``evaluate`` with sample
  weights traces its own test step only; a ``fit`` with sample weights after
  one without (or the reverse) raises ``ArgumentError`` saying so.
"""
import numpy as np
import tensorflow as tf

from autodist.errors import ArgumentError
from autodist.runtime.elastic import scaled_batch_size
from autodist.runtime.keras.data import Batches, num_rows, take, unpack, validation_split
from autodist.runtime.keras.state import ModelState, VariableAccess, route_learning_rate
from autodist.runtime.keras.steps import KerasSteps, node_share, uses_ema

__all__ = ["KerasRunner", "attach", "runner_of"]


class KerasRunner:
    """The distributed ``fit``/``evaluate``/``predict`` of one model (see the module docstring)."""

    def __init__(self, autodist, job, model):
        self._ad, self._job, self.model = autodist, job, model
        self.steps = KerasSteps(model)
        self._fn = {name: autodist.function(getattr(self.steps, name)) for name in
                    ("train_step", "test_step", "predict_step", "read_metrics", "finalize")}
        self._local = None    # a local session computing metric results from global state
        self._state = None    # ModelState: the model's variables for callbacks, once traced
        self._tracing = False
        self._train_weighted = None   # once traced: whether the training step takes sample weights
        self._train_traced_by = None  # "fit" or "evaluate"
        self.pending_weights = None   # the chief's values to give the model before the next run, or None

    @property
    def traced(self):
        """True once the steps were traced (by a ``fit`` or ``evaluate``): ``predict`` can run."""
        return self._state is not None

    # -- tracing and running -------------------------------------------------------------------
    def _trace(self, batch, what):
        """Trace every step for this batch's signature (before any run: one session serves them all).

        The training step is traced once per model (one synchronized update
        per variable): by the first ``fit``, or by an ``evaluate`` that comes
        first (then without sample weights, as most fits are). ``evaluate``
        after it traces its own test step only, with or without sample weights.
        """
        x, y, sample_weight = batch
        if what == "fit":
            self._check_train_signature(sample_weight is not None)
        self._tracing = True
        try:
            if what == "fit" or self._train_weighted is None:
                weights = sample_weight if what == "fit" else None
                self._fn["train_step"].trace(x, y, weights, np.float32(1.0), np.float64(1.0))
                if self._train_weighted is None:
                    self._train_weighted, self._train_traced_by = weights is not None, what
            self._fn["test_step"].trace(x, y, sample_weight, np.float32(1.0))
            self._fn["predict_step"].trace(x)
            self._fn["read_metrics"].trace()
            if self._ema():
                self._fn["finalize"].trace()
        finally:
            self._tracing = False
        if self._state is None:
            self._route_state()
        self._give_pending_weights()

    def _ema(self):
        return self.model.optimizer is not None and uses_ema(self.model.optimizer)

    def _check_train_signature(self, weighted):
        if self._train_weighted is None or self._train_weighted == weighted:
            return
        raise ArgumentError(
            "model.fit({}): this model's training step was traced {} sample weights by its first {}, and autodist "
            "traces a model's training step once (one synchronized update per variable). Give sample weights (or "
            "class_weight) in every fit of this model, or in none".format(
                "sample_weight=... or class_weight=..." if weighted else "without sample weights",
                "with" if self._train_weighted else "without", self._train_traced_by))

    def _give_pending_weights(self):
        """Every replica gets the chief's ``pending_weights`` (``autodist run``'s eager model), once traced; not
        while a resumed job is before its checkpoint's step (``autodist run --checkpoint-dir``): the restored
        weights are later ones. Every node knows that once its session is open (a platform-started job's with
        the chief's plan), so all take the same way."""
        if self.pending_weights is not None:
            self._assignment()
            checkpoints = self._job.checkpoints
            if checkpoints is None or not checkpoints.skipping:
                self._state.load_chiefs(self.pending_weights)
            self.pending_weights = None

    def _route_state(self):
        """The model's weights and learning rate for callbacks go through the session (``state``)."""
        import keras
        self._state = ModelState(self._ad, self._job, self.model)
        for name in ("get_weights", "set_weights", "save_weights", "save"):
            object.__setattr__(self.model, name, getattr(self._state, name))
        optimizer = self.model.optimizer
        rate = getattr(optimizer, "_learning_rate", None)
        if rate is not None and not isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            access = VariableAccess(self._job, [rate], self._ad.graph_item.graph)
            route_learning_rate(optimizer, access, lambda: self._tracing)

    def _assignment(self):
        if self._job.session is None:
            self._ad.create_distributed_session()
        return self._job.session.transform_result.assignment

    def _shard(self, batch):
        """This node's rows of a global batch, and the batch's size."""
        x, y, sample_weight = batch
        rows = num_rows(x)
        share = node_share(rows, self._assignment())
        return (take(x, share), take(y, share), take(sample_weight, share)), rows

    def _run_train(self, batch):
        (x, y, sample_weight), rows = self._shard(batch)
        replicas = self._assignment().num_replicas
        self._fn["train_step"](x, y, sample_weight, np.float32(replicas / rows), np.float64(replicas))

    def _run_test(self, batch):
        """The batch's metric state: every row evaluated on this node's replicas (no step synchronizes)."""
        x, y, sample_weight = batch
        added = self._fn["test_step"](x, y, sample_weight, np.float32(1.0 / num_rows(x)))
        return [np.sum(part, axis=0) for part in added]

    def _read(self):
        return [np.asarray(value) for value in self._fn["read_metrics"]()]

    def _logs(self, values, results=None):
        """The metrics' results (or ``results``: a custom step's logs) for the metric state ``values``."""
        results = results or self.steps.results
        if self._local is None:
            self._local = tf.compat.v1.Session(graph=self._ad.graph_item.graph)
        computed = self._local.run(results.tensors, results.feed(values))
        return {name: float(value) if np.ndim(value) == 0 else value for name, value in computed.items()}

    # -- the loops -----------------------------------------------------------------------------
    def _callbacks(self, callbacks, verbose, **params):
        import keras
        if isinstance(callbacks, keras.callbacks.CallbackList):
            return callbacks
        verbose = 1 if verbose == "auto" else verbose
        progbar = bool(verbose) and self._ad.is_chief
        return keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=progbar, model=self.model,
                                            verbose=verbose, **params)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        """Keras' ``fit`` on the global batch over every replica of the job (module docstring)."""
        if validation_split and validation_data is None:
            (x, y, sample_weight), validation_data = _split(x, y, sample_weight, validation_split)
        batch_size = scaled_batch_size("model.fit", x, batch_size, self._ad.batch_scale)   # keep_per_replica_batch
        batches = Batches.of("fit", x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch)
        self._trace(batches.example(), "fit")
        if self._job.checkpoints is not None:
            self._assignment()   # the session opens (a resumed job restores its checkpoint) before a step is passed
        callbacks = self._callbacks(callbacks, verbose, epochs=epochs, steps=batches.steps())
        val = None if validation_data is None else _validation(validation_data, validation_batch_size or batch_size,
                                                                validation_steps)
        self.model.stop_training = False
        callbacks.on_train_begin()
        epoch_logs = None
        for epoch in range(initial_epoch, epochs):
            logs = self._fit_epoch(batches, epoch, callbacks)
            if logs is None:   # every step of the epoch is in the checkpoint the job resumed from
                continue
            epoch_logs = logs
            if val is not None and (epoch + 1) % validation_freq == 0:
                val_logs = self._evaluate_loop(val(), callbacks)
                epoch_logs.update({"val_" + name: value for name, value in val_logs.items()})
            callbacks.on_epoch_end(epoch, epoch_logs)
            if self.model.stop_training:
                break
        if epochs > 0 and self._ema():   # as Keras: the moving averages become the weights
            self._fn["finalize"]()
        callbacks.on_train_end(logs=epoch_logs)
        return self.model.history

    def _fit_epoch(self, batches, epoch, callbacks):
        """The epoch's logs; None when every step of it was passed over (``autodist run --checkpoint-dir``'s
        resume: the batches are drawn, the steps the checkpoint holds are not run, nor their callbacks)."""
        base, logs, passed = None, {}, 0
        checkpoints = self._job.checkpoints
        for step, batch in enumerate(batches.epoch(epoch)):
            if checkpoints is not None and checkpoints.skip():
                passed += 1
                continue
            if base is None:
                base = self._begin_epoch(epoch, callbacks)
            callbacks.on_train_batch_begin(step)
            self._run_train(batch)
            logs = self._logs([now - before for now, before in zip(self._read(), base)], self.steps.train_results)
            callbacks.on_train_batch_end(step, logs)
            if self.model.stop_training:
                break
        if base is None:
            if passed:
                return None
            self._begin_epoch(epoch, callbacks)   # an epoch without batches
        return dict(logs)

    def _begin_epoch(self, epoch, callbacks):
        """The job's training metric state so far (this epoch's logs are what it adds), and the epoch begins."""
        base = self._read()
        callbacks.on_epoch_begin(epoch)
        return base

    def _evaluate_loop(self, batches, callbacks):
        callbacks.on_test_begin()
        logs, state = {}, None
        for step, batch in enumerate(batches.epoch(0)):
            callbacks.on_test_batch_begin(step)
            added = self._run_test(batch)
            state = added if state is None else [total + part for total, part in zip(state, added)]
            logs = self._logs(state, self.steps.test_results)
            callbacks.on_test_batch_end(step, logs)
        callbacks.on_test_end(logs)
        return logs

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        """Keras' ``evaluate``: the metrics over the whole data, computed on every replica of the job."""
        batches = Batches.of("evaluate", x, y, sample_weight, batch_size, steps=steps)
        self._trace(batches.example(), "evaluate")
        callbacks = self._callbacks(callbacks, verbose, epochs=1, steps=batches.steps())
        logs = self._evaluate_loop(batches, callbacks)
        if return_dict:
            return logs
        return self.model._flatten_metrics_in_order(logs)

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras' ``predict``: every batch split over this node's replicas; every node returns all rows."""
        batches = Batches.of("predict", x, batch_size=batch_size, steps=steps)
        self._tracing = True
        try:
            self._fn["predict_step"].trace(batches.example()[0])
        finally:
            self._tracing = False
        if self.traced:
            self._give_pending_weights()
        callbacks = self._callbacks(callbacks, verbose, epochs=1, steps=batches.steps())
        callbacks.on_predict_begin()
        outputs = []
        for step, (bx, _, _) in enumerate(batches.epoch(0)):
            callbacks.on_predict_batch_begin(step)
            outputs.append(self._fn["predict_step"](bx))
            callbacks.on_predict_batch_end(step, {"outputs": outputs[-1]})
        callbacks.on_predict_end()
        return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *outputs)


def _split(x, y, sample_weight, split):
    """``fit``'s ``validation_split``: Keras' refusals (a dataset, too few rows) as ``ArgumentError``."""
    if not 0.0 < split < 1.0:
        raise ArgumentError("fit(validation_split={!r}): expected a fraction between 0 and 1".format(split))
    return validation_split(x, y, sample_weight, split)


def _validation(data, batch_size, steps):
    """``fit``'s validation batches, each validation from the start (as Keras' cached evaluation iterator)."""
    if not isinstance(data, (tuple, list)):   # a tf.data.Dataset or a PyDataset (anything else is refused)
        return lambda: Batches.of("fit", data, steps=steps)
    if len(data) not in (2, 3):
        raise ArgumentError("fit(validation_data=...): expected (x_val, y_val), (x_val, y_val, val_sample_weight), a "
                            "tf.data.Dataset or a keras.utils.PyDataset, as in Keras; got {} items".format(len(data)))
    x, y, sample_weight = unpack(tuple(data))
    return lambda: Batches.of("fit", x, y, sample_weight, batch_size, steps=steps)


def attach(autodist, job, model):
    """Give ``model`` distributed ``fit``/``evaluate``/``predict`` (instance attributes; the class is untouched)."""
    runner = KerasRunner(autodist, job, model)
    for name in ("fit", "evaluate", "predict"):
        object.__setattr__(model, name, getattr(runner, name))
    object.__setattr__(model, "_autodist_runner", runner)
    return runner


def runner_of(model):
    """The ``KerasRunner`` ``attach`` gave ``model`` (compiled in the scope), or None."""
    return model.__dict__.get("_autodist_runner")
