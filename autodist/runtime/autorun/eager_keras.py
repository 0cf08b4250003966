"""``autodist run`` for an unmodified Keras ``fit`` script: the eager model gets a distributed twin.

A script that knows nothing about autodist builds and compiles its model
eagerly, before any graph exists, so the scope the API uses
(``autodist.runtime.keras.fit``) never sees it. While ``autodist run`` runs the
script, ``keras.Model.fit``, ``evaluate`` and ``predict`` (the class's methods,
put back afterwards) hand a compiled model to this module. The first call
rebuilds the model in the AutoDist's graph, inside its scope, and every call
runs the twin's distributed method::

    script's model (eager, compiled)           twin (autodist's graph, compiled in ad.scope())
    type(model).from_config(get_config())  ->  same class and layers (a custom train_step too)
    compile(...) arguments                 ->  the same losses; the optimizer and metric
                                               objects rebuilt from their configs
    weights      --before each call: the chief's values, to every replica-->
                 <--after each fit: the trained (synchronized) values--

So the script's model holds the trained weights after ``fit`` (``save``,
``get_weights``, calling it eagerly work as on one device), and weights the
script sets between calls (``load_weights``) are what the next call uses;
except in a job that resumes from ``autodist run --checkpoint-dir``: until the
script is back at the checkpoint's step, the restored weights win. The
twin's optimizer keeps its state across calls; the script's optimizer object is
not updated. One model per script is distributed (one AutoDist runs one job).
"""
import contextlib

import tensorflow as tf

from autodist.errors import CaptureError

__all__ = ["distribute_eager_keras", "EagerTwins", "INTERCEPTED"]

INTERCEPTED = ("fit", "evaluate", "predict")

_API_HINT = ("or use autodist's API instead (build and compile the model in `with tf.Graph().as_default(), "
             "ad.scope():`, docs/keras.md)")


class _Config:
    """A Keras object's class and config, taken eagerly (``get_config`` may read variables), rebuilt later."""

    def __init__(self, obj):
        self.cls, self.config = type(obj), obj.get_config()

    def rebuild(self):
        return self.cls.from_config(self.config)


def _configured(obj):
    return _Config(obj) if hasattr(obj, "get_config") and hasattr(type(obj), "from_config") else obj


def _rebuilt(obj):
    return obj.rebuild() if isinstance(obj, _Config) else obj


def _map(structure, fn):
    if isinstance(structure, (list, tuple)):
        return type(structure)(_map(item, fn) for item in structure)
    if isinstance(structure, dict):
        return {key: _map(value, fn) for key, value in structure.items()}
    return None if structure is None else fn(structure)


class _Recipe:
    """What rebuilds the script's compiled model: its config and its ``compile`` arguments, taken eagerly.

    The losses are used as they are (stateless); the optimizer and metric
    objects hold variables, so fresh ones are made from their configs.
    """

    def __init__(self, model):
        self.model = _Config(model)
        self.build = model.get_build_config()
        self.compile = dict(model._compile_config.config)
        self.compile["optimizer"] = _configured(self.compile["optimizer"])
        for key in ("metrics", "weighted_metrics"):
            self.compile[key] = _map(self.compile.get(key), _configured)

    def rebuild(self):
        """The compiled model, in the default graph."""
        twin = self.model.rebuild()
        if not twin.built:
            twin.build_from_config(self.build)
        arguments = dict(self.compile)
        arguments["optimizer"] = _rebuilt(arguments["optimizer"])
        for key in ("metrics", "weighted_metrics"):
            arguments[key] = _map(arguments.get(key), _rebuilt)
        twin.compile(**arguments)
        return twin


def _check_same_weights(model, twin):
    mine = [tuple(w.shape) for w in model.weights]
    theirs = [tuple(w.shape) for w in twin.weights]
    if mine != theirs:
        raise CaptureError(
            "autodist run rebuilt {} from its config with weights of shapes {}, but the script's model has {}: "
            "its get_config does not describe it completely. Give it (and its custom layers) a complete "
            "get_config, {}".format(type(model).__name__, theirs, mine, _API_HINT))


class EagerTwins:
    """The distributed twin of the script's compiled model (see the module docstring)."""

    def __init__(self, autodist):
        self._ad = autodist
        self.model = None
        self.twin = None
        self.runner = None

    def twin_of(self, model, method):
        """The twin of ``model``, built at its first call; ``method`` names the call for messages."""
        if self.model is None:
            self._build(model, method)
        elif model is not self.model:
            raise CaptureError(
                "model.{}(): autodist run distributes one Keras model per script, the first to call "
                "fit/evaluate/predict ({}); this is another ({}). Train one model per script, {}".format(
                    method, self.model.name, model.name, _API_HINT))
        return self.twin

    def _build(self, model, method):
        if not getattr(model, "compiled", False) or getattr(model, "_compile_config", None) is None:
            raise CaptureError(
                "model.{}() under autodist run needs a compiled model: call model.compile(optimizer=..., "
                "loss=...) before it (autodist distributes the compiled training step)".format(method))
        if not model.built:
            raise CaptureError("model.{}() under autodist run needs a built model: give it a keras.Input (or "
                               "call it once on data) before compile".format(method))
        from autodist.runtime.keras.fit import runner_of
        try:
            recipe = _Recipe(model)
            with tf.Graph().as_default(), self._ad.scope():
                twin = recipe.rebuild()
        except CaptureError:
            raise
        except Exception as e:
            raise CaptureError(
                "autodist run rebuilds the script's Keras model in its graph from model.get_config() and the "
                "compile() arguments; {} could not be rebuilt: {}: {}. Give the model, its layers and metrics "
                "get_config/from_config, {}".format(type(model).__name__, type(e).__name__, e, _API_HINT)) from e
        _check_same_weights(model, twin)
        self.model, self.twin, self.runner = model, twin, runner_of(twin)

    def call(self, model, method, args, kwargs):
        """``model.method(*args, **kwargs)`` run by the twin, the weights moved as the docstring says."""
        twin = self.twin_of(model, method)
        if method == "predict" and not self.runner.traced:
            raise CaptureError(
                "model.predict() under autodist run comes after the model's first fit or evaluate: the "
                "distributed session starts with the training step those trace")
        self.runner.pending_weights = model.get_weights()
        result = getattr(twin, method)(*args, **kwargs)
        if method == "fit":
            with tf.init_scope():
                model.set_weights(twin.get_weights())
        return result


def _intercept(twins, method):
    def intercepted(model, *args, **kwargs):
        return twins.call(model, method, args, kwargs)
    intercepted.__name__ = method
    intercepted.__doc__ = "``{}`` distributed by autodist run (autodist.runtime.autorun.eager_keras).".format(method)
    return intercepted


@contextlib.contextmanager
def distribute_eager_keras(autodist):
    """Within the block, ``fit``/``evaluate``/``predict`` of an eager Keras model run on ``autodist``'s job.

    Yields the ``EagerTwins``. ``keras.Model`` gets its methods back on exit,
    also after an exception. Without Keras the block changes nothing.
    """
    try:
        import keras
    except ImportError:
        yield None
        return
    twins = EagerTwins(autodist)
    model = keras.Model
    saved = [(name, model.__dict__.get(name), name in model.__dict__) for name in INTERCEPTED]
    try:
        for name in INTERCEPTED:
            setattr(model, name, _intercept(twins, name))
        yield twins
    finally:
        for name, original, had in saved:
            if had:
                setattr(model, name, original)
            else:
                delattr(model, name)
