"""The loss the gradients are taken of, marked where Keras scales it: so a replica can compute its share.

Keras' ``optimizer.scale_loss(loss)`` returns the loss the gradients are
computed of (``fit`` calls it in every train step; a loop of one's own under a
``LossScaleOptimizer`` has to). Inside ``ad.scope()`` its result passes through
an identity whose gradient is multiplied by a marker, a placeholder of 1.0::

    scaled = optimizer.scale_loss(loss)     value: scaled as Keras returns it
                                            gradient: d/d scaled = 1.0 * LOSS_SHARE marker

On one device the marker is 1.0 and nothing changes. A replica of a job
computes the gradient of its shard's mean loss, which is about as large as
one device's gradient of the whole batch and is only divided by the replica
count R after the replicas' sum. In float16 (mixed precision) that order
overflows: under dynamic loss scaling a shard whose rows pull the same way
gives an inf that the one device, averaging it with the other shards, never
meets, and the job skips a step the one device takes. The kernel
(``autodist.kernel.loss_shares``) therefore sets the marker to ``1 / R`` on
every replica, so that each replica's backward pass computes its share of the
one device's gradient (per example, the very values the one device
computes), and multiplies the synchronized mean by R again in float32.

The marker is made once per call of the outermost ``scale_loss`` (an
optimizer's ``scale_loss`` calling another's is marked once).
"""
import functools
import re
import threading

import tensorflow as tf

__all__ = ["LOSS_SHARE", "mark_share", "wrap_scale_loss", "share_markers"]

#: The marker's op name (TensorFlow appends ``_1``, ``_2`` ... for every further one).
LOSS_SHARE = "AutoDist-LossShare"
_MARKER = re.compile(r"(^|/){}(_\d+)?$".format(re.escape(LOSS_SHARE)))

_local = threading.local()


def mark_share(scaled):
    """``scaled`` through an identity whose gradient is multiplied by a new marker (module docstring)."""
    if tf.executing_eagerly() or not isinstance(scaled, tf.Tensor) or not scaled.dtype.is_floating:
        return scaled
    graph = scaled.graph
    with graph.name_scope(None), graph.control_dependencies(None):
        marker = tf.compat.v1.placeholder_with_default(tf.constant(1.0, scaled.dtype), [], name=LOSS_SHARE)

    @tf.custom_gradient
    def share(x):
        return tf.identity(x), lambda dy: dy * marker

    return share(scaled)


def wrap_scale_loss(scale_loss):
    """Wrap an optimizer's ``scale_loss`` so that the outermost call marks its result."""

    @functools.wraps(scale_loss)
    def wrapper(self, loss):
        if getattr(_local, "depth", 0):
            return scale_loss(self, loss)
        _local.depth = 1
        try:
            scaled = scale_loss(self, loss)
        finally:
            _local.depth = 0
        return mark_share(scaled)

    return wrapper


def share_markers(graph):
    """The marker ops in ``graph``, by name order."""
    return sorted((op for op in graph.get_operations()
                   if op.type == "PlaceholderWithDefault" and _MARKER.search(op.name)), key=lambda op: op.name)
