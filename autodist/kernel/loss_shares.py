"""Loss shares: under mixed precision each replica computes its share of the one device's gradient.

A replica differentiates its shard's mean loss; the synchronizers take the
mean over the R replicas. In float32 the order does not matter. In float16 it
does: a replica's gradient is about as large as the one device's gradient of
the whole batch, and one whose rows pull the same way overflows where the
one device, which sums those rows with the others' before the result is
rounded to float16, does not (``autodist.capture.loss_share``). Under dynamic
loss scaling the job then skips steps one device takes.

The capture marks the loss every gradient is taken of (Keras' ``scale_loss``)
with a marker of 1.0 in its gradient. This pass, on a job of R replicas whose
gradients are computed in float16, sets the marker to ``1 / R`` and has every
update read R times the synchronized gradient::

    before                                          after
    marker = 1.0                                    marker = 1 / R
    loss' --(x marker)--> backward --> g --> apply  loss' --(x 1/R)--> backward --> g --> (sync) --> x R --> apply

``g`` stays the variable's recorded gradient, so every synchronizer after
this pass averages the replicas' shares, whose float16 sum is the one
device's gradient (per example the backward pass computes the one device's
very values); the update's ``x R`` runs in the gradient's float32 (after the
cast up of a half gradient), exact for a power-of-two R. Every gradient the
marker reaches is treated so, float16 or not; the others (a gradient of a
loss that did not pass through ``scale_loss``) are left alone.
"""
import tensorflow as tf

from autodist.capture.loss_share import share_markers
from autodist.kernel.analysis import analyze
from autodist.kernel.base import Pass, PassResult
from autodist.kernel.walks import forward_ops

__all__ = ["LossShares"]


class LossShares(Pass):
    """The loss-shares pass (module docstring); details: the op names of the variables whose updates read R x."""

    name = "loss_shares"

    def __init__(self, replicas):
        self.replicas = int(replicas)

    def __call__(self, item):
        if self.replicas < 2 or not share_markers(item.graph):
            return PassResult(item, ())
        analysis = analyze(item)
        work = item.copy()
        graph = work.graph
        markers = share_markers(graph)
        reached = {op.name for op in forward_ops([m.outputs[0] for m in markers],
                                                 {op.name for op in graph.get_operations()})}
        shared = []
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
            for marker in markers:
                with tf.name_scope("AutoDist-LossShare/"):
                    share = tf.constant(1.0 / self.replicas, marker.outputs[0].dtype, name="share")
                marker._update_input(0, share)
            for var_op in sorted(analysis.grad_tensors):
                parts = {c: graph.get_tensor_by_name(t) for c, t in analysis.grad_tensors[var_op].items()}
                key = "dense" if "dense" in parts else "values"
                if parts[key].op.name in reached:
                    self._scale_update(graph, analysis, var_op, key, parts[key])
                    shared.append(var_op)
        return PassResult(work, tuple(shared))

    def _scale_update(self, graph, analysis, var_op, key, grad):
        """The update of ``var_op`` reads ``R x`` its gradient (the mean of the replicas' shares)."""
        with tf.name_scope("AutoDist-LossShare/{}/".format(var_op)):
            whole = tf.math.multiply(grad, tf.constant(self.replicas, grad.dtype), name="whole")
        for entry in analysis.grad_inputs[var_op]:
            if entry.component == key:
                graph.get_operation_by_name(entry.consumer)._update_input(entry.index, whole)
