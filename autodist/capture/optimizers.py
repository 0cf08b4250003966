"""Capture of every optimizer for the length of a scope, through the seed's decorators.

``capture_optimizers()`` replaces, for the lifetime of a ``with`` block only,
the methods below by their wraps (``autodist.capture.recording``), which record
into the default GraphItem:

    tf.compat.v1.train.Optimizer and subclasses   __init__  -> wrap_optimizer_init
                                                  apply_gradients -> wrap_optimizer_apply_gradient
    Keras 3 optimizers (BaseOptimizer and subclasses)
                                                  __init__  -> wrap_optimizer_init
                                                  apply_gradients, apply -> wrap_optimizer_apply_gradient
                                                  scale_loss -> wrap_scale_loss (``loss_share``)

Only methods a class defines itself are wrapped (an inherited one is wrapped
where it is defined). On exit, also after an exception, every class gets its
original methods back: outside the block TensorFlow and Keras are untouched.
"""
import contextlib

from autodist.capture.keras import optimizer_base as keras_optimizer_base
from autodist.capture.loss_share import wrap_scale_loss
from autodist.capture.recording import wrap_optimizer_apply_gradient, wrap_optimizer_init

__all__ = ["capture_optimizers"]


def _tf1_base():
    from tensorflow.python.training.optimizer import Optimizer
    return Optimizer


def _classes(base):
    seen, todo = [], [base]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return seen


def _wrap_plan():
    """(class, attribute, decorator) for every method the scope wraps."""
    plan = []
    applied = wrap_optimizer_apply_gradient
    for base, methods in ((_tf1_base(), (("apply_gradients", applied),)),
                          (keras_optimizer_base(), (("apply_gradients", applied), ("apply", applied),
                                                    ("scale_loss", wrap_scale_loss)))):
        for cls in _classes(base):
            if "__init__" in cls.__dict__:
                plan.append((cls, "__init__", wrap_optimizer_init))
            for name, decorator in methods:
                if name in cls.__dict__:
                    plan.append((cls, name, decorator))
    return plan


@contextlib.contextmanager
def capture_optimizers():
    """Wrap optimizer classes for the duration of the block; always restore them."""
    wrapped = []
    try:
        for cls, name, decorator in _wrap_plan():
            original = cls.__dict__[name]
            setattr(cls, name, decorator(original))
            wrapped.append((cls, name, original))
        yield
    finally:
        for cls, name, original in reversed(wrapped):
            setattr(cls, name, original)
