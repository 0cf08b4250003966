"""IndexedSlices and SparseTensors in fetches and feeds: their component tensors, and the values they give back.

A plain ``tf.compat.v1.Session`` fetches and feeds these composites through
their components (AutoDist's session did too); the distributed session maps
each component like any tensor (``autodist.runtime.session.distributed``): fed, split
along its unknown dimension; fetched, concatenated over the replicas, so a
gradient's slices come from every replica::

    fetch IndexedSlices(values, indices, dense_shape) -> IndexedSlicesValue(values, indices, dense_shape)
    fetch SparseTensor(indices, values, dense_shape)  -> SparseTensorValue(indices, values, dense_shape)
"""
import tensorflow as tf
from tensorflow.python.framework.indexed_slices import IndexedSlicesValue   # tf.compat.v1 does not export it

from autodist.errors import SessionError

__all__ = ["components", "composite_value", "component_feeds"]


def components(item):
    """The component tensors of an IndexedSlices or a SparseTensor, in its value type's field order; else None.

    A plain ``tf.compat.v1.Session`` fetches and feeds these composites through
    their components, so the distributed session does too: each component
    follows the rules of a tensor (see the module docstring).
    """
    if isinstance(item, tf.IndexedSlices):
        return [item.values, item.indices] + ([item.dense_shape] if item.dense_shape is not None else [])
    if isinstance(item, tf.SparseTensor):
        return [item.indices, item.values, item.dense_shape]
    return None


def composite_value(item, values):
    """The value ``tf.compat.v1.Session`` returns for composite ``item`` from its component values."""
    if isinstance(item, tf.IndexedSlices):
        return IndexedSlicesValue(values[0], values[1], values[2] if len(values) > 2 else None)
    return tf.compat.v1.SparseTensorValue(*values)


def component_feeds(feed_dict):
    """``feed_dict`` with each composite key replaced by its components (a dict, or the None given).

    A composite takes its ``...Value`` or the tuple of its components, as in
    ``tf.compat.v1.Session``; anything else is a SessionError naming the key.
    """
    if not feed_dict or not any(components(key) is not None for key in feed_dict):
        return feed_dict
    feeds = {}
    for key, value in feed_dict.items():
        parts = components(key)
        if parts is None:
            feeds[key] = value
            continue
        values = list(value) if isinstance(value, (tuple, list)) else None
        if values is None or len(values) != len(parts):
            raise SessionError("feed for the {} of '{}' must be its {}Value (or a tuple of its {} components), got "
                               "{!r}".format(type(key).__name__, parts[0].name, type(key).__name__, len(parts),
                                             type(value).__name__))
        feeds.update(zip(parts, values))
    return feeds
