"""Accumulate: k micro-steps of batch b, one synchronized update, the same as one step of batch k*b.

With ``accumulation_steps = k`` every train op T gets a *micro-step* twin,
and T itself applies the mean of the k micro-batches' gradients::

    micro-step (calls 1..k-1)              update (call k)
    acc += g                               g' = (acc + g) / k  --> synchronize --> apply(g')
    (Keras' own counters, the EMA)                                  acc = 0

Each replica keeps its own accumulators (ordinary mirrored variables): a
micro-step runs nothing across nodes, and the passes after this one
synchronize g' exactly as they would synchronize g (parameter-server pushes,
all-reduce, compression, sparse all-gathers alike). The session runs the
micro-step twin in place of T on k-1 of every k calls (``autodist.runtime.session.distributed``).

An IndexedSlices gradient accumulates as rows: its values and indices are
appended to growing buffers and the update sees every micro-batch's rows,
concatenated and never merged per index, as one device sees the rows of the
batch of k*b. The mean divides the values by k.

Train ops marked ``every_step`` on the GraphItem (Keras ``fit``'s metric
state) are left alone: they update and synchronize at every call. The pass
records each accumulated train op's twin in its details; accumulators are
local variables, kept out of checkpoints (which are taken on update
boundaries, when they are zero).
"""
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.walks import ancestors
from autodist.kernel.base import Pass, PassResult
from autodist.plan.names import accumulator_scope, micro_step_name

__all__ = ["Accumulate"]


class Accumulate(Pass):
    """The accumulate pass; details: {train op: the op name of its micro-step twin}."""

    name = "accumulate"

    def __init__(self, steps):
        self.steps = int(steps or 1)

    def __call__(self, item):
        if self.steps <= 1:
            return PassResult(item, {})
        analysis = analyze(item)
        groups = _train_op_groups(item, analysis)
        if not groups:
            return PassResult(item, {})
        work = item.copy()
        graph = work.graph
        twins, records = {}, {}
        with graph.as_default():
            for train_op, var_ops in groups.items():
                adds, accumulators = [], []
                for var_op in var_ops:
                    grad, add, kept = self._accumulate(graph, analysis, var_op)
                    records[var_op] = grad
                    adds.append(add)
                    accumulators.extend(kept)
                twins[train_op] = self._twin(graph, work, train_op, adds)
                self._reset_after(graph, train_op, accumulators)
        return PassResult(_result(item, work, records, analysis), twins)

    def _accumulate(self, graph, analysis, var_op):
        """``(g', micro-step op, accumulators)`` for one variable; its apply ops now read g'."""
        facts = analysis.variables[var_op]
        parts = {c: graph.get_tensor_by_name(t) for c, t in analysis.grad_tensors[var_op].items()}
        with tf.name_scope(accumulator_scope(var_op)), graph.control_dependencies(None):
            if "dense" in parts:
                grad = parts["dense"]
                acc = _local_variable(tf.zeros(facts.shape, grad.dtype), "sum", facts.shape)
                add = acc.assign_add(grad, read_value=False)
                mean = {"dense": (acc.read_value() + grad) / tf.cast(self.steps, grad.dtype)}
                kept = [acc]
            else:
                values, indices = parts["values"], tf.cast(parts["indices"], tf.int64)
                row = facts.shape.as_list()[1:]
                kept_values = _local_variable(tf.zeros([0] + row, values.dtype), "values", [None] + row)
                kept_indices = _local_variable(tf.zeros([0], tf.int64), "indices", [None])
                add = tf.group(kept_values.assign(tf.concat([kept_values.read_value(), values], 0), read_value=False),
                               kept_indices.assign(tf.concat([kept_indices.read_value(), indices], 0),
                                                   read_value=False))
                mean = {"values": tf.concat([kept_values.read_value(), values], 0) / tf.cast(self.steps, values.dtype),
                        "indices": tf.cast(tf.concat([kept_indices.read_value(), indices], 0), parts["indices"].dtype)}
                if "dense_shape" in parts:
                    mean["dense_shape"] = parts["dense_shape"]
                kept = [kept_values, kept_indices]
        for entry in analysis.grad_inputs[var_op]:
            if entry.component in mean:
                graph.get_operation_by_name(entry.consumer)._update_input(entry.index, mean[entry.component])
        if "dense" in mean:
            return mean["dense"], add, kept
        return tf.IndexedSlices(mean["values"], mean["indices"], mean.get("dense_shape")), add, kept

    @staticmethod
    def _twin(graph, item, train_op, adds):
        extras = [graph.get_operation_by_name(name) for name in item.micro_step_ops.get(train_op, ())]
        with graph.name_scope(None):
            return tf.group(*(adds + extras), name=micro_step_name(train_op)).name

    @staticmethod
    def _reset_after(graph, train_op, accumulators):
        """Zero (or empty) ``accumulators`` after everything ``train_op`` waits for, before it is done."""
        op = graph.get_operation_by_name(train_op)
        before = list(op.control_inputs) + [t.op for t in op.inputs]
        resets = []
        with graph.control_dependencies(before):
            for variable in accumulators:
                rows = variable.shape.as_list()
                empty = tf.zeros([0] + rows[1:] if rows and rows[0] is None else rows, variable.dtype)
                resets.append(variable.assign(empty, read_value=False))
        op._add_control_inputs(resets)


def _local_variable(initial, name, shape):
    return tf.compat.v1.Variable(initial, name=name, trainable=False, shape=tf.TensorShape(shape),
                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES], use_resource=True)


def _train_op_groups(item, analysis):
    """{accumulated train op: the variables it updates}; refuses a variable two kinds of train op update."""
    every = set(item.every_step_train_ops)
    graph = item.graph
    groups, owner = {}, {}
    for train_op in item.train_op_names:
        reached = {op.name for op in ancestors([graph.get_operation_by_name(train_op)])}
        var_ops = sorted(v for v, update in analysis.update_ops.items() if update in reached)
        for var_op in var_ops:
            kind = train_op in every
            if owner.setdefault(var_op, kind) != kind:
                raise TransformError("is updated by a train op that accumulates gradients and by one that updates "
                                     "at every step", pass_name=Accumulate.name, variable=var_op, op=train_op)
        if train_op not in every and var_ops:
            groups[train_op] = var_ops
    return groups


def _result(item, work, records, analysis):
    """The item with the accumulated means as the variables' gradients and the accumulators in its info."""
    out = work
    out.info = item.info.copy()
    out.info.update_variables(out.graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES), replace=False)
    for var_op, grad in sorted(records.items()):
        target = analysis.variables[var_op].name
        out.pop_gradient_info(target)
        out.extend_gradient_info([grad], [out.graph.get_tensor_by_name(target)],
                                 [out.graph.get_operation_by_name(analysis.update_ops[var_op])])
    return out
