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
run the steps of ``autodist.runtime.keras_steps`` through ``ad.function``:

- **Batches.** ``batch_size`` is the global batch. Arrays are cut into global
  batches (shuffled per epoch with a seed every node shares, or in order with
  ``shuffle=False``), the last one partial as in Keras; a ``tf.data.Dataset``
  yields global batches (iterated eagerly, so ``fit`` runs outside the
  ``with tf.Graph().as_default()`` block). In ``fit`` each node feeds its
  replicas' rows of every batch (``keras_steps.node_share``), so an epoch visits
  each example once across the cluster. ``evaluate`` and ``predict`` feed every
  batch whole to each node's own replicas (no step synchronizes, nodes need not
  wait for each other), so every node holds every result.
- **Logs.** After each training step the job's accumulated metric state is read
  and the metrics' results are computed from it (``keras_steps``); evaluation
  sums its replicas' additions. Every node holds the logs of the whole job,
  equal to the single-device run's.
- **Callbacks** run on every node on those same logs, so every node takes the
  same decisions (``EarlyStopping``, ``model.stop_training``) and stays in step;
  the progress bar is the chief's only. The model's weights and learning rate
  they read and set go through the session (``keras_state``; checkpoints are
  written by the chief). As with Keras' multi-worker training, other callbacks
  that write files write on every node.
- The first call traces every step (train, test, predict) before the session
  opens, so later calls (``fit`` again, ``evaluate``, ``predict``) reuse it.
"""
import numpy as np
import tensorflow as tf

from autodist.errors import FunctionError
from autodist.runtime.keras_state import ModelState, VariableAccess, route_learning_rate
from autodist.runtime.keras_steps import KerasSteps, node_share, uses_ema

__all__ = ["KerasRunner", "attach", "runner_of"]

SHUFFLE_SEED = 1234   # every node draws the same permutation of the same epoch


def _take(nest, index):
    return tf.nest.map_structure(lambda a: None if a is None else np.asarray(a)[index], nest)


def _num_rows(x):
    return len(tf.nest.flatten(x)[0])


def _unpack(element):
    """(x, y, sample_weight) of a dataset element, as Keras reads one."""
    if isinstance(element, tuple):
        return tuple(element) + (None,) * (3 - len(element))
    return element, None, None


class _Batches:
    """The global batches of one epoch: from arrays (sliced, maybe shuffled) or from a dataset."""

    def __init__(self, x, y, sample_weight, batch_size, shuffle, what):
        self.dataset = isinstance(x, tf.data.Dataset)
        if self.dataset and not tf.executing_eagerly():
            raise FunctionError("{}(dataset) iterates the dataset eagerly: call it outside the "
                                "`with tf.Graph().as_default()` block".format(what))
        if not self.dataset and x is None:
            raise FunctionError("{}() needs data: x (and y) arrays or a tf.data.Dataset".format(what))
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.batch_size = batch_size or 32
        self.shuffle = shuffle

    def steps(self):
        if self.dataset:
            count = int(self.x.cardinality())
            return count if count >= 0 else None
        return -(-_num_rows(self.x) // self.batch_size)

    def epoch(self, epoch):
        if self.dataset:
            for element in self.x.as_numpy_iterator():
                yield _unpack(element)
            return
        rows = _num_rows(self.x)
        order = np.random.RandomState(SHUFFLE_SEED + epoch).permutation(rows) if self.shuffle else np.arange(rows)
        for start in range(0, rows, self.batch_size):
            index = order[start:start + self.batch_size]
            yield _take(self.x, index), _take(self.y, index), _take(self.sample_weight, index)


def _example(batches):
    """The first global batch, to trace the steps with."""
    for batch in batches.epoch(0):
        return batch
    raise FunctionError("the data holds no batch")


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
        self.pending_weights = None   # the chief's values to give the model before the next run, or None

    @property
    def traced(self):
        """True once the steps were traced (by a ``fit`` or ``evaluate``): ``predict`` can run."""
        return self._state is not None

    # -- tracing and running -------------------------------------------------------------------
    def _trace(self, batch):
        """Trace every step for this batch's signature (before any run: one session serves them all)."""
        x, y, sample_weight = batch
        self._tracing = True
        try:
            self._fn["train_step"].trace(x, y, sample_weight, np.float32(1.0), np.float64(1.0))
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

    def _give_pending_weights(self):
        """Every replica gets the chief's ``pending_weights`` (``autodist run``'s eager model), once traced."""
        if self.pending_weights is not None:
            self._assignment()
            self._state.load_chiefs(self.pending_weights)
            self.pending_weights = None

    def _route_state(self):
        """The model's weights and learning rate for callbacks go through the session (``keras_state``)."""
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
        rows = _num_rows(x)
        share = node_share(rows, self._assignment())
        return (_take(x, share), _take(y, share), _take(sample_weight, share)), rows

    def _run_train(self, batch):
        (x, y, sample_weight), rows = self._shard(batch)
        replicas = self._assignment().num_replicas
        self._fn["train_step"](x, y, sample_weight, np.float32(replicas / rows), np.float64(replicas))

    def _run_test(self, batch):
        """The batch's metric state: every row evaluated on this node's replicas (no step synchronizes)."""
        x, y, sample_weight = batch
        added = self._fn["test_step"](x, y, sample_weight, np.float32(1.0 / _num_rows(x)))
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
            validation_data=None, shuffle=True, sample_weight=None, initial_epoch=0, validation_batch_size=None,
            validation_freq=1):
        """Keras' ``fit`` on the global batch over every replica of the job (module docstring)."""
        if validation_split and validation_data is None and not isinstance(x, tf.data.Dataset):
            cut = int(_num_rows(x) * (1.0 - validation_split))
            head, tail = np.arange(cut), np.arange(cut, _num_rows(x))
            validation_data = (_take(x, tail), _take(y, tail), _take(sample_weight, tail))
            x, y, sample_weight = _take(x, head), _take(y, head), _take(sample_weight, head)
        batches = _Batches(x, y, sample_weight, batch_size, shuffle, "fit")
        self._trace(_example(batches))
        callbacks = self._callbacks(callbacks, verbose, epochs=epochs, steps=batches.steps())
        self.model.stop_training = False
        callbacks.on_train_begin()
        epoch_logs = None
        for epoch in range(initial_epoch, epochs):
            epoch_logs = self._fit_epoch(batches, epoch, callbacks)
            if validation_data is not None and (epoch + 1) % validation_freq == 0:
                val = _validation(validation_data, validation_batch_size or batches.batch_size)
                val_logs = self._evaluate_loop(val, callbacks)
                epoch_logs.update({"val_" + name: value for name, value in val_logs.items()})
            callbacks.on_epoch_end(epoch, epoch_logs)
            if self.model.stop_training:
                break
        if epochs > 0 and self._ema():   # as Keras: the moving averages become the weights
            self._fn["finalize"]()
        callbacks.on_train_end(logs=epoch_logs)
        return self.model.history

    def _fit_epoch(self, batches, epoch, callbacks):
        base = self._read()       # the job's training metric state so far: this epoch's is what it adds
        callbacks.on_epoch_begin(epoch)
        logs = {}
        for step, batch in enumerate(batches.epoch(epoch)):
            callbacks.on_train_batch_begin(step)
            self._run_train(batch)
            logs = self._logs([now - before for now, before in zip(self._read(), base)], self.steps.train_results)
            callbacks.on_train_batch_end(step, logs)
            if self.model.stop_training:
                break
        return dict(logs)

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

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, callbacks=None,
                 return_dict=False):
        """Keras' ``evaluate``: the metrics over the whole data, computed on every replica of the job."""
        batches = _Batches(x, y, sample_weight, batch_size, False, "evaluate")
        self._trace(_example(batches))
        callbacks = self._callbacks(callbacks, verbose, epochs=1, steps=batches.steps())
        logs = self._evaluate_loop(batches, callbacks)
        if return_dict:
            return logs
        return self.model._flatten_metrics_in_order(logs)

    def predict(self, x, batch_size=None, verbose="auto", callbacks=None):
        """Keras' ``predict``: every batch split over this node's replicas; every node returns all rows."""
        batches = _Batches(x, None, None, batch_size, False, "predict")
        self._tracing = True
        try:
            self._fn["predict_step"].trace(_example(batches)[0])
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


def _validation(data, batch_size):
    if isinstance(data, tf.data.Dataset):
        return _Batches(data, None, None, None, False, "fit")
    x, y, sample_weight = tuple(data) + (None,) * (3 - len(data))
    return _Batches(x, y, sample_weight, batch_size, False, "fit")


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
