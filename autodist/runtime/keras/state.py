"""The model's variables for Keras callbacks: read, written and saved through the distributed session.

Callbacks touch variables eagerly: ``EarlyStopping(restore_best_weights=True)``
calls ``get_weights``/``set_weights``, ``ModelCheckpoint`` calls
``save_weights``/``save``, ``LearningRateScheduler`` reads and sets
``optimizer.learning_rate``. A model compiled in ``AutoDist.scope()`` has graph
variables whose values live in the distributed session, so these go there:

    get_weights()       the synchronized values (this node's, equal on every node)
    set_weights(ws)     fed whole to an assign in every replica (every node makes the call:
                        callbacks run on every node)
    save_weights(path)  save(path)   the chief writes what single-device Keras writes for
                        these values (an eager twin of the model holds them); other nodes write nothing
    optimizer.learning_rate         read from / assigned in the session, outside tracing

The assigns are built when the steps are traced, before the session opens.
"""
import numpy as np
import tensorflow as tf

from autodist.capture.queries import tf_variable

__all__ = ["VariableAccess", "ModelState", "route_learning_rate"]


class VariableAccess:
    """Reads and whole-value writes of some Keras variables through the AutoDist's current session."""

    def __init__(self, job, variables, graph):
        self._job = job
        self.variables = [tf_variable(v) for v in variables]
        self._feeds, assigns = [], []
        with graph.as_default(), graph.name_scope(None), graph.name_scope("autodist_set_weights"):
            for variable in self.variables:
                holder = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape)
                self._feeds.append(holder)
                assigns.append(variable.assign(holder, read_value=False))
            self._assign = tf.group(*assigns)

    def read(self):
        return [np.asarray(value) for value in self._job.session.run(self.variables)]

    def write(self, values):
        if len(values) != len(self.variables):
            raise ValueError("set_weights: expected {} arrays (one per weight), got {}"
                             .format(len(self.variables), len(values)))
        feed = {holder: np.asarray(value, holder.dtype.as_numpy_dtype).reshape(holder.shape)
                for holder, value in zip(self._feeds, values)}
        self._job.session.run(self._assign, feed)


class ModelState:
    """``get_weights``, ``set_weights``, ``save_weights`` and ``save`` of one model (module docstring)."""

    def __init__(self, autodist, job, model):
        self._ad, self._job, self.model = autodist, job, model
        self.access = VariableAccess(job, model.weights, autodist.graph_item.graph)
        self._twin = None

    def get_weights(self):
        return self.access.read()

    def set_weights(self, weights):
        self.access.write(list(weights))

    def load_chiefs(self, weights):
        """Every copy of the weights gets the chief's ``weights`` (ignored on other nodes).

        Every node calls this at the same point (the values travel by
        broadcast); the session's other variables keep their values.
        """
        from autodist.checkpoint.binding import load_state, read_state
        from autodist.runtime.session.function import state_specs
        session = self._job.session
        specs = state_specs(self._ad.graph_item.graph, session)
        state = None
        if self._ad.is_chief:
            state = read_state(session, specs)
            for variable, value in zip(self.access.variables, weights):
                key = variable.op.name
                state[key] = np.asarray(value, specs[key].dtype.as_numpy_dtype).reshape(specs[key].shape)
        load_state(session, specs, state)

    def _twin_with_values(self):
        values = self.access.read()
        with tf.init_scope():     # eager, also when fit runs inside the graph block
            if self._twin is None:
                self._twin = type(self.model).from_config(self.model.get_config())
            self._twin.set_weights(values)
        return self._twin

    def save_weights(self, filepath, overwrite=True, **kwargs):
        if self._ad.is_chief:
            twin = self._twin_with_values()
            with tf.init_scope():
                twin.save_weights(filepath, overwrite=overwrite, **kwargs)

    def save(self, filepath, overwrite=True, **kwargs):
        if self._ad.is_chief:
            twin = self._twin_with_values()
            with tf.init_scope():
                twin.save(filepath, overwrite=overwrite, **kwargs)


def route_learning_rate(optimizer, access, tracing):
    """Make ``optimizer.learning_rate`` read and assign the session's value outside tracing.

    ``access`` is a ``VariableAccess`` of the optimizer's learning-rate
    variable; ``tracing()`` says whether a step is being traced (then Keras'
    own property, the graph variable, is used). Changes the optimizer's class
    to a subclass of it with that property; the class itself is untouched.
    """
    base = type(optimizer)

    def get(self):
        return base.learning_rate.fget(self) if tracing() else float(access.read()[0])

    def set(self, value):
        if tracing():
            base.learning_rate.fset(self, value)
        else:
            access.write([value])
    optimizer.__class__ = type(base.__name__, (base,), {"learning_rate": property(get, set),
                                                         "__module__": base.__module__})
