"""Batch statistics across the job: synchronized batch norm, and per-replica statistics read as their mean.

Synchronized batch norm (``autodist.capture.batch_norm``): every marker the
capture left (the forward pass's ``[sum x, sum x^2, count]`` of a layer, and
the backward pass's gradient of them) takes the sum over every replica of
every node::

    replica r:   local_r --[marker]--> moments          local_r --sum over the job--> [marker] --> moments

Among collectives (one job-wide group) the sum is an all-reduce, or for a
small tensor on CPU replicas an all-gather whose rows every replica adds in
replica order (``contract.gathers``), so every replica gets the same bits and
the moving statistics stay equal. A job that also keeps variables on
parameter servers across nodes relays the sums through the chief instead
(``relay.relay_sum``): a step with collectives must not touch other nodes'
servers. Marker ``i`` (by name, the same on every node) has the instance key
``key_base + STATISTICS_KEY_OFFSET + i`` (the "statistics" window of ``names.KEY_WINDOWS``).

Mean on read: for every per-replica statistic the capture recorded, each
local replica gets ``mean_on_read_name(var)``, the mean of every replica's
copy in the job (another node's copies read where they live, through a handle
to the same resource); fetches, checkpoints and exports read that.
"""
import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from autodist.errors import TransformError
from autodist.kernel.base import Pass, PassResult, editor_for, hand_over
from autodist.kernel.synchronization import relay
from autodist.kernel.synchronization.compressor import Collectives
from autodist.plan.contract import CollectiveSpec, gathers
from autodist.plan.names import (MEAN_ON_READ_SCOPE, job_container, key_window, mean_on_read_name,
                                 replica_prefix)

__all__ = ["SyncStatistics"]


class SyncStatistics(Pass):
    """The statistics pass (module docstring); details: {statistic variable: its mean-on-read tensor name}."""

    name = "sync_statistics"
    requires = ("sync_between_graph",)

    def __init__(self, assignment, markers, on_read):
        self.assignment = assignment
        self.markers = tuple(markers)      # marker op names of the single-device graph, sorted
        self.on_read = tuple(v for v in on_read if v in assignment.analysis.variables and v not in
                             assignment.ps_state)

    def __call__(self, item):
        assignment = self.assignment
        if assignment.num_replicas == 1 or not (self.markers or self.on_read):
            return PassResult(item, {})
        editor = editor_for(item, assignment, self.name)
        if self.markers:
            self._synchronize(editor)
        scratch = editor.scratch()
        with scratch.graph.as_default():
            means = {var_op: self._mean_on_read(scratch, var_op) for var_op in self.on_read}
        scratch.commit()
        return PassResult(hand_over(editor, item), means)

    def _synchronize(self, editor):
        """Feed every local copy of every marker the job-wide sum of its input."""
        assignment = self.assignment
        relayed = assignment.node.num_tasks > 1 and bool(assignment.ps_vars)
        template, others = assignment.local[0], assignment.local[1:]
        scratch = editor.scratch()
        totals = {}
        with scratch.graph.as_default():
            for index, marker in enumerate(self.markers):
                source = assignment.analysis.graph.get_operation_by_name(marker).inputs[0]
                if relayed:
                    locals_ = [scratch.tensor(r.prefix + source.name) for r in assignment.local]
                    with tf.name_scope("AutoDist-SyncBN/{}/".format(index)):
                        total = relay.relay_sum(assignment, "statistics_{}".format(index), locals_, source.dtype,
                                                source.shape)
                    totals.update({r.prefix + marker: scratch.name_of(total) for r in assignment.local})
                else:
                    total = self._collective_sum(scratch, source, index, template)
                    totals[template.prefix + marker] = scratch.name_of(total)
        built = scratch.commit()
        if not relayed:   # every replica's collectives are the template's with its prefix and device
            editor.clone_for_replicas(built, template, others)
            for replica in others:
                totals.update({name.replace(template.prefix, replica.prefix): total.replace(
                    template.prefix, replica.prefix) for name, total in list(totals.items())
                    if name.startswith(template.prefix)})
        for consumer, total in totals.items():
            editor.set_input(consumer, 0, total)

    def _collective_sum(self, scratch, source, index, replica):
        """The sum of ``source`` over every replica of the job, built for ``replica``: an all-reduce, or an
        all-gather whose rows every replica adds in replica order (small tensors on CPUs)."""
        assignment = self.assignment
        collectives = Collectives(assignment)
        first, end = key_window("statistics")
        if index >= end - first:
            raise TransformError("the model has more than {} synchronized batch-norm statistics, the collective keys "
                                 "of the job's 'statistics' window; synchronize fewer BatchNormalization layers "
                                 "(synchronized=False on some)".format(end - first))
        key = assignment.key_base + first + index
        nbytes = source.shape.num_elements() * source.dtype.size if source.shape.is_fully_defined() else None
        hint = collectives.hint(replica, CollectiveSpec.AUTO)
        local = scratch.tensor(replica.prefix + source.name)
        with tf.device(replica.device), tf.name_scope("AutoDist-SyncBN/{}/{}".format(index, replica.prefix)):
            if gathers(nbytes, [r.device for r in assignment.replicas]):
                rows = collectives.all_gather(local[None], key, hint)
                return tf.math.add_n(tf.unstack(rows, num=assignment.num_replicas), name="sum")
            return collectives.all_reduce(local, key, hint, final="Id")

    def _mean_on_read(self, scratch, var_op):
        """Each local replica's ``mean_on_read_name(var_op)``: the mean of every replica's copy; its name."""
        assignment = self.assignment
        facts = assignment.analysis.variables[var_op]
        copies = _copies_by_task(assignment)
        for replica in assignment.local:
            with tf.device(replica.device):
                with tf.name_scope("{}{}-reads/".format(replica.prefix, mean_on_read_name(var_op))):
                    reads = [_read(device, replica_prefix(local_index) + var_op, facts, assignment)
                             for device, local_index in copies]
                    mean = tf.math.add_n(reads) / tf.constant(len(reads), facts.dtype)
                with tf.name_scope(replica.prefix + MEAN_ON_READ_SCOPE):
                    tf.identity(mean, name=var_op)
        return mean_on_read_name(var_op) + ":0"


def _copies_by_task(assignment):
    """``[(device, local index on its node)]`` of every replica of the job, in strategy order."""
    seen, copies = {}, []
    for replica in assignment.replicas:
        index = seen.get(replica.host_cpu, 0)
        seen[replica.host_cpu] = index + 1
        copies.append((replica.device, index))
    return copies


def _read(device, copy_name, facts, assignment):
    """A read, on ``device``, of the copy ``copy_name`` (a handle to the resource that node created)."""
    with tf.device(device):
        handle = gen_resource_variable_ops.var_handle_op(
            dtype=facts.dtype, shape=facts.shape, container=job_container(assignment.node.job_id),
            shared_name=copy_name, name="handle")
        return gen_resource_variable_ops.read_variable_op(handle, facts.dtype)
