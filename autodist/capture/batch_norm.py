"""Batch normalization in the scope: statistics the kernel can synchronize, and statistics read as a mean.

``BatchNormalization(synchronized=True)`` asks for the batch statistics of
every replica of the job (as tf.distribute's all-reduce and Horovod's
``SyncBatchNormalization`` give). Keras computes them through a
tf.distribute replica context that a captured graph does not have, so it
would normalize each replica's shard with the shard's statistics. Inside
``ad.scope()`` such a layer (every ``BatchNormalization`` under
``AutoDist(sync_batch_norm=True)``, as PyTorch's ``convert_sync_batchnorm``
converts a model) computes its moments from three sums per channel that pass
through a marker::

    local = [sum x, sum x^2, count]  --SYNC_STATISTICS-->  total  -> mean = sum / count,
                                                                     var = sum x^2 / count - mean^2
    backward:  d total  --SYNC_STATISTICS_GRAD-->  d local

On one device both markers are identities and the numbers are Keras' own
synchronized moments. The kernel (``autodist.kernel.synchronization.statistics``)
makes each the sum over every replica of every node: the forward marker in
the forward pass, so every replica normalizes with the global batch's
statistics and updates its moving statistics with them (the copies stay
equal), and the backward marker so each replica's gradient of its local sums
is the whole job's, as the gradient of a sum over replicas is.

A layer left per replica (``synchronized=False``, no switch) keeps
per-replica moving statistics; its variables are recorded (``MEAN_ON_READ``)
so that what is read, saved or exported is their mean over the job's
replicas, as tf.distribute's on-read variables give.
"""
import contextlib
import functools
import re

import tensorflow as tf

from autodist.capture.queries import tf_variable
from autodist.errors import CaptureError

__all__ = ["SYNC_STATISTICS", "SYNC_STATISTICS_GRAD", "MEAN_ON_READ", "synchronized_batch_norm",
           "statistics_markers", "mean_on_read_variables"]

SYNC_STATISTICS = "AutoDist-SyncBN"
SYNC_STATISTICS_GRAD = "AutoDist-SyncBN-grad"
#: graph collection: op names of per-replica statistics (read, saved and exported as their mean over replicas)
MEAN_ON_READ = "autodist_mean_on_read"
_MARKER = re.compile(r"(^|/)({}|{})(_\d+)?$".format(re.escape(SYNC_STATISTICS), re.escape(SYNC_STATISTICS_GRAD)))
_STATISTICS = ("moving_mean", "moving_variance", "moving_stddev", "renorm_mean", "renorm_stddev")


def _batch_normalization():
    from keras.src.layers.normalization.batch_normalization import BatchNormalization
    return BatchNormalization


@contextlib.contextmanager
def synchronized_batch_norm(every_layer=False):
    """Within the block, Keras' BatchNormalization computes synchronized statistics where asked (``every_layer``:
    in every layer) and records the variables of the others; restored on exit, also after an exception."""
    cls = _batch_normalization()
    original = cls.__dict__["_moments"]

    @functools.wraps(original)
    def moments(self, inputs, mask):
        graph = getattr(inputs, "graph", None)
        if tf.executing_eagerly() or graph is None:
            return original(self, inputs, mask)
        if not (self.synchronized or every_layer):
            _record_mean_on_read(graph, self)
            return original(self, inputs, mask)
        if mask is not None:
            raise CaptureError("BatchNormalization '{}' is called with a mask: its statistics are per replica and "
                               "cannot be synchronized across the job; leave sync_batch_norm off (and "
                               "synchronized=False) for this layer's model, or call it without a mask"
                               .format(self.name))
        if self.synchronized:
            return job_moments(inputs, self._reduction_axes)
        return job_moments_two_pass(inputs, self._reduction_axes)

    cls._moments = moments
    try:
        yield
    finally:
        cls._moments = original


def _record_mean_on_read(graph, layer):
    names = graph.get_collection_ref(MEAN_ON_READ)
    for attribute in _STATISTICS:
        variable = getattr(layer, attribute, None)
        if variable is not None and tf_variable(variable).op.name not in names:
            names.append(tf_variable(variable).op.name)


def job_moments(x, axes):
    """Keras' synchronized moments of ``x`` over ``axes`` (one pass: E[x^2] - E[x]^2), from the job-wide sums."""
    local = tf.stack([tf.reduce_sum(x, axis=axes, keepdims=True), tf.reduce_sum(tf.square(x), axis=axes, keepdims=True),
                      tf.reduce_sum(tf.ones_like(x), axis=axes, keepdims=True)])
    total_sum, total_squares, count = tf.unstack(_job_sum(local))
    mean = tf.math.divide_no_nan(total_sum, count)
    variance = tf.maximum(tf.math.divide_no_nan(total_squares, count) - tf.square(mean), 0.0)
    return tf.squeeze(mean, axes), tf.squeeze(variance, axes)


def job_moments_two_pass(x, axes):
    """``tf.nn.moments`` of ``x`` over ``axes`` (the mean, then the mean squared difference from it, which a
    layer with ``synchronized=False`` computes on one device), from job-wide sums: two rounds."""
    first = tf.stack([tf.reduce_sum(x, axis=axes, keepdims=True), tf.reduce_sum(tf.ones_like(x), axis=axes,
                                                                                keepdims=True)])
    total_sum, count = tf.unstack(_job_sum(first))
    mean = total_sum / count
    centred = tf.reduce_sum(tf.math.squared_difference(x, tf.stop_gradient(mean)), axis=axes, keepdims=True)
    variance = _job_sum(centred) / count
    return tf.squeeze(mean, axes), tf.squeeze(variance, axes)


@tf.custom_gradient
def _job_sum(local):
    total = tf.identity(local, name=SYNC_STATISTICS)

    def grad(upstream):
        return tf.identity(upstream, name=SYNC_STATISTICS_GRAD)
    return total, grad


def statistics_markers(graph):
    """The markers' ops in ``graph`` (forward and backward), by name order."""
    return sorted((op for op in graph.get_operations() if op.type == "Identity" and _MARKER.search(op.name)),
                  key=lambda op: op.name)


def mean_on_read_variables(graph):
    """Op names of the per-replica statistics recorded in ``graph`` (``MEAN_ON_READ``), sorted."""
    return sorted(set(graph.get_collection(MEAN_ON_READ)))
