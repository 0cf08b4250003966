"""Half gradients: a gradient computed in half precision travels in half precision.

Under Keras' ``mixed_float16`` (or ``mixed_bfloat16``) policy a float32
weight is cast to half for the forward pass; its gradient is a half gradient
cast back up. Synchronizing the float32 cast would move twice the bytes. This
pass makes the half gradient the one the later passes synchronize; the cast
up moves behind the synchronization, into the update::

    before                                   after
    g16 --Cast--> g32 ==sync==> apply        g16 ==sync==> Cast --> g32 --> apply

When gradients are accumulated, the accumulators keep float32 (their sum is
exact) and the mean is cast down for the wire. Which variables qualify is
decided on the captured graph (``datasets.uneven.half_wire_dtypes``), so that
the planner's byte counts and the kernel agree. Dense float16 gradients only:
an IndexedSlices gradient keeps its dtype, a bfloat16 gradient travels as
float32 (TensorFlow's CPU collectives and parameter-server accumulators have
no bfloat16 kernels; the graph transformer leaves them out), and so does every
gradient of a job with uneven inputs (weighed by its rows before the
synchronization, ``kernel/uneven_inputs.py``). The replicas' half gradients
are each one's share of the one device's (``loss_shares``), so their float16
sum holds where the one device's gradient does.
"""
import tensorflow as tf

from autodist.capture.queries import half_source
from autodist.kernel.analysis import analyze
from autodist.kernel.base import Pass, PassResult

__all__ = ["HalfGradients"]


class HalfGradients(Pass):
    """The half-gradients pass (module docstring); details: {variable op name: the dtype it travels in}."""

    name = "half_gradients"

    def __init__(self, dtypes):
        self.dtypes = dict(dtypes)

    def __call__(self, item):
        if not self.dtypes:
            return PassResult(item, {})
        analysis = analyze(item)
        work = item.copy()
        graph = work.graph
        moved = {}
        with graph.as_default():
            for var_op, dtype in sorted(self.dtypes.items()):
                if var_op not in analysis.grad_tensors or "dense" not in analysis.grad_tensors[var_op]:
                    continue
                grad = graph.get_tensor_by_name(analysis.grad_tensors[var_op]["dense"])
                moved[var_op] = self._wire(graph, analysis, var_op, grad, dtype)
        for var_op, wire in moved.items():
            target = analysis.variables[var_op].name
            work.pop_gradient_info(target)
            work.extend_gradient_info([wire], [graph.get_tensor_by_name(target)],
                                      [graph.get_operation_by_name(analysis.update_ops[var_op])])
        return PassResult(work, {v: self.dtypes[v] for v in moved})

    @staticmethod
    def _wire(graph, analysis, var_op, grad, dtype):
        """The half tensor to synchronize for ``grad``; the update reads it cast back up."""
        source = half_source(grad)
        if source is not None and source.dtype == dtype:
            return source   # the cast up is already the update's input
        with tf.name_scope("AutoDist-Half/{}/".format(var_op)), graph.control_dependencies(None):
            down = tf.cast(grad, dtype, name="down")
            up = tf.cast(down, grad.dtype, name="up")
        for entry in analysis.grad_inputs[var_op]:
            graph.get_operation_by_name(entry.consumer)._update_input(entry.index, up)
        return down
