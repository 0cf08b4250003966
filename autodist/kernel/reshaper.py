"""Reshapes that share their shape constants.

The fused collectives flatten every gradient and restore every shape; with
``tf.reshape(t, [-1])`` each of those makes its own ``Const`` op, which is
most of the ops (and the build time) a fused group adds. A ``Reshaper``
makes one constant per distinct shape in the current graph and name scope
and reuses it::

    reshape = Reshaper()
    flat = [reshape(g, [-1]) for g in grads]         # one Const for all of them
"""
import tensorflow as tf
from tensorflow.python.ops import gen_array_ops

__all__ = ["Reshaper"]


class Reshaper:
    """``reshape(tensor, shape, name=None)`` with one ``Const`` per distinct shape.

    ``shape`` is a fully defined ``tf.TensorShape`` or a list of ints (one may be -1).
    A tensor whose static shape already is ``shape`` comes back as it is,
    unless a ``name`` asks for an op of its own.

    Build one inside the ``tf.device`` / ``tf.name_scope`` the reshapes belong
    to: the constants are created where the first reshape of their shape is.
    """

    def __init__(self):
        self._shapes = {}

    def __call__(self, tensor, shape, name=None):
        dims = tuple(shape.as_list() if isinstance(shape, tf.TensorShape) else shape)
        if any(d is None for d in dims):
            raise ValueError("cannot reshape {} to the partly unknown shape {}".format(tensor.name, list(dims)))
        if name is None and _already(tensor.shape, dims):
            return tensor
        const = self._shapes.get(dims)
        if const is None:
            const = self._shapes[dims] = tf.constant(list(dims), tf.int32, name="shape")
        return gen_array_ops.reshape(tensor, const, name=name or "Reshape")


def _already(static, dims):
    """Whether a tensor of static shape ``static`` needs no reshape to ``dims``."""
    if not static.is_fully_defined():
        return False
    have = static.as_list()
    if dims == (-1,):
        return len(have) == 1
    return tuple(have) == dims
