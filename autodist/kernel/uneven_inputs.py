"""Uneven inputs: each gradient weighed by its replica's rows, the update divided by the job's rows.

``AutoDist(uneven_inputs=...)`` reads the training input one element ahead
(``autodist.capture.datasets.uneven``) and records, in the captured graph, a
state variable whose gradient is a replica's ``[rows, next]``. This pass,
before every other, wires the rest on this node's copy of the graph::

    before                                     after
    get_next --> ... g_v --> apply_v           check --> get_next --> ... g_v --> x_v = g_v * rows --> (sync)
                                                                                   x_v / progress[0] --> apply_v
                 progress --> state.assign     train op waits for state.assign(progress)

``x_v`` becomes the variable's recorded gradient, so every synchronizer that
follows averages ``g_v * rows`` over the replicas, and the synchronizers give
the update's division the averaged ``progress`` (its consumers in the update
are rerouted like any gradient's): ``sum_r rows_r g_r / sum_r rows_r``. A
replica without data has ``rows = 0``: its (finite or not) gradient counts
zero (``multiply_no_nan``). The check reads the state the previous step
stored and fails the step before any batch is read when the epoch is over.

Gradient accumulation and asynchronous or stale training are refused: the
weights of one step's rows must meet in that step's synchronization.
"""
import tensorflow as tf

from autodist.capture.datasets.uneven import CHECK, PROGRESS, STATE, UPDATE, reads_ahead
from autodist.errors import TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.base import Pass, PassResult

__all__ = ["UnevenInputs", "reads_ahead"]


class UnevenInputs(Pass):
    """The uneven-inputs pass (module docstring); details: the weighed variables' op names."""

    name = "uneven_inputs"

    def __init__(self, entries):
        self.entries = entries

    def __call__(self, item):
        if not reads_ahead(item):
            return PassResult(item, ())
        self._check_plan()
        analysis = analyze(item)
        work = item.copy()
        graph = work.graph
        progress = graph.get_tensor_by_name(PROGRESS + ":0")
        rows = progress.op.inputs[0]
        get_next = rows.op
        get_next._add_control_input(graph.get_operation_by_name(CHECK))
        state_op = progress_target(analysis)
        weighed = {}
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
            for var_op in sorted(analysis.grad_tensors):
                if var_op != state_op:
                    weighed[var_op] = _weigh(graph, analysis, var_op, rows, progress)
        update = graph.get_operation_by_name(UPDATE)
        for train_op in work.train_op_names:
            graph.get_operation_by_name(train_op)._add_control_input(update)
        for var_op, grad in weighed.items():
            target = analysis.variables[var_op].name
            work.pop_gradient_info(target)
            work.extend_gradient_info([grad], [graph.get_tensor_by_name(target)],
                                      [graph.get_operation_by_name(analysis.update_ops[var_op])])
        return PassResult(work, tuple(sorted(weighed)))

    def _check_plan(self):
        if self.entries.accumulation_steps > 1:
            raise TransformError("uneven_inputs weighs each step's gradients by the rows of that step; it cannot be "
                                 "combined with gradient accumulation (accumulation_steps={}): leave one of them "
                                 "out".format(self.entries.accumulation_steps), pass_name=self.name)
        kinds = {getattr(getattr(e, "synchronizer", None), "kind", None) for e in self.entries.synchronized.values()}
        state = self.entries.synchronized.get(STATE)
        if state is not None and getattr(state.synchronizer, "kind", None) == "ps" and "ar" in kinds:
            raise TransformError("uneven_inputs: the strategy all-reduces some variables but keeps the input "
                                 "progress on a parameter server, where the replicas that all-reduce cannot read "
                                 "its mean in their update; plan it with all-reduce too", pass_name=self.name,
                                 variable=STATE)
        for var_op, entry in sorted(self.entries.synchronized.items()):
            sync = getattr(entry, "synchronizer", entry)
            if not getattr(sync, "sync", True) or getattr(sync, "staleness", 0):
                raise TransformError("uneven_inputs needs synchronous training: every replica's rows of a step must "
                                     "meet in that step's update, but the strategy trains this variable "
                                     "asynchronously or with staleness; use sync=True, staleness=0",
                                     pass_name=self.name, variable=var_op)


def progress_target(analysis):
    """The op name of the variable whose gradient is ``PROGRESS``."""
    for var_op, parts in analysis.grad_tensors.items():
        if parts.get("dense") == PROGRESS + ":0":
            return var_op
    raise TransformError("the input progress has no variable", pass_name=UnevenInputs.name, op=PROGRESS)


def _weigh(graph, analysis, var_op, rows, progress):
    """``x_v`` for one variable (its recorded gradient from now on); its update reads ``x_v / progress[0]``."""
    parts = {c: graph.get_tensor_by_name(t) for c, t in analysis.grad_tensors[var_op].items()}
    scope = "AutoDist-Input/weigh/{}/".format(var_op)
    with tf.name_scope(scope):
        key = "dense" if "dense" in parts else "values"
        grad = parts[key]
        weighed = tf.math.multiply_no_nan(grad, tf.cast(rows, grad.dtype), name="weighed")
        total = tf.cast(progress[0], grad.dtype, name="rows")   # a consumer of the progress: rerouted to its mean
        mean = tf.math.divide(weighed, total, name="mean")
    for entry in analysis.grad_inputs[var_op]:
        if entry.component == key:
            graph.get_operation_by_name(entry.consumer)._update_input(entry.index, mean)
    if key == "dense":
        return weighed
    return tf.IndexedSlices(weighed, parts["indices"], parts.get("dense_shape"))
