"""Parameter-server synchronization.

In-graph (``reduce_locally``): this node's replica gradients of each
parameter-server variable become one: a sum (dense) or a concatenation
(IndexedSlices), on the node's first replica device. A node with one replica
uses its dense gradients as they are.

Between graphs (``synchronize_ps``), per variable (small dense synchronous gradients bound for one
server travel together: ``_Bucket``, ``contract.fused_pushes``):

    sync          every node pushes its local sum into a SUM accumulator on the
                  server (an IndexedSlices gradient: its entries into its own
                  queue there, ``slices.py``: the chief concatenates them, never
                  merging an index's entries, as one device has them); the chief
                  takes all of them, divides by the number of replicas and
                  applies, writes the update into every node's local proxy of
                  the variable (if it has one, ``proxy.py``), then releases one
                  token to each other node, which waits for it before its step
                  ends:

                  node k:  local ---push---> [accumulator on PS] <---push--- chief: local
                           wait(token_k) <------ release <-- apply <-- take(W) / R

                  Every token queue lives on the chief: its release is local
                  and a node's wait runs with its pushes, so no step needs a
                  round trip to a node for its token alone (tiny model, PS:
                  2.44 -> 1.96 kB and 3.67 -> 2.65 CPU ms per worker-step).

    async         every node applies its own local mean, nobody waits
    staleness=s   as async, plus a barrier that keeps every node within s steps of
                  the slowest (``staleness.py``)

Only one replica per applying node runs the update (the others' writes of the
variable and its slots become NoOps waiting for it), so the variable, its
slots and the optimizer's step counters advance once per step.
"""
import math

import tensorflow as tf

from autodist.capture.queries import op_of
from autodist.kernel import packing
from autodist.plan.contract import fused_pushes
from autodist.plan.names import host_cpu, sync_scope
from autodist.kernel.synchronization import proxy, slices, staleness, wiring

__all__ = ["reduce_locally", "synchronize_ps", "local_names"]

_ANY_STEP = 2 ** 62  # accumulators drop gradients older than their step; ours never are
_TOKEN_CAPACITY = 2 ** 30


def local_names(var_op):
    base = "AutoDist-PS/{}/".format(var_op)
    return {"dense": base + "local_sum:0", "values": base + "local_values:0",
            "indices": base + "local_indices:0", "dense_shape": base + "local_dense_shape:0"}


def _single_dense(assignment, var):
    """A dense gradient of a node with one replica needs no local reduction: it is the sum."""
    return len(assignment.local) == 1 and not var.sparse


def _local_name(assignment, var, component):
    """This node's local gradient component of ``var`` (made by ``reduce_locally``, or its one replica's)."""
    if _single_dense(assignment, var):
        return assignment.local[0].prefix + assignment.analysis.grad_tensors[var.op_name]["dense"]
    return local_names(var.op_name)[component]


def _local(scratch, assignment, var, facts, component):
    """A stand-in for this node's local gradient component (made by ``reduce_locally``)."""
    shapes = {"dense": facts.shape, "values": [None] + facts.shape.as_list()[1:],
              "indices": [None], "dense_shape": [facts.shape.rank]}
    dtype = assignment.analysis.grad_dtype(var.op_name) if component in ("dense", "values") else tf.int64
    return scratch.tensor(_local_name(assignment, var, component), dtype=dtype, shape=shapes[component])


class _Divisors:
    """``x / count`` with one constant per (device, dtype, count); ``x`` itself when count is 1."""

    def __init__(self):
        self._consts = {}

    def __call__(self, x, count, name):
        if count == 1:
            return x
        key = (x.device, x.dtype, count)
        if key not in self._consts:
            self._consts[key] = tf.constant(count, x.dtype, name="replicas")
        return tf.math.truediv(x, self._consts[key], name=name)


def _combine(tensors, name, op):
    return tf.identity(tensors[0], name=name) if len(tensors) == 1 else op(tensors, name=name)


def reduce_locally(editor, assignment):
    """Sum (or concatenate) this node's replica gradients of every parameter-server variable."""
    if not assignment.ps_vars:
        return
    scratch = editor.scratch()
    with scratch.graph.as_default():
        for var in assignment.ps_vars:
            parts = assignment.analysis.grad_tensors[var.op_name]
            facts = assignment.analysis.variables[var.op_name]
            if _single_dense(assignment, var):
                continue
            with tf.device(assignment.local[0].device), tf.name_scope("AutoDist-PS/{}/".format(var.op_name)):
                if not var.sparse:
                    grads = [scratch.tensor(r.prefix + parts["dense"]) for r in assignment.local]
                    _combine(grads, "local_sum", tf.add_n)
                    continue
                concat = lambda ts, name: tf.concat(ts, 0, name=name)  # noqa: E731
                values = [scratch.tensor(r.prefix + parts["values"]) for r in assignment.local]
                _combine(values, "local_values", concat)
                indices = [tf.cast(scratch.tensor(r.prefix + parts["indices"]), tf.int64) for r in assignment.local]
                _combine(indices, "local_indices", concat)
                if "dense_shape" in parts:
                    shape = tf.cast(scratch.tensor(assignment.local[0].prefix + parts["dense_shape"]), tf.int64)
                else:
                    shape = tf.constant(facts.shape.as_list(), tf.int64)
                tf.identity(shape, name="local_dense_shape")
    scratch.commit()


def _accumulate(scratch, var, assignment, facts, divide):
    """Push this node's local gradient; on the chief, take all of them. Returns (push or None, agg or None)."""
    job, destination = assignment.node.job_id, var.synchronizer.destination
    with tf.device(destination), tf.name_scope("AutoDist-PS/{}/accumulator/".format(var.op_name)):
        if var.sparse:
            values, indices = (_local(scratch, assignment, var, facts, c) for c in ("values", "indices"))
            push, gathered = slices.gather_slices(assignment, destination, "{}/slices/{}".format(job, var.op_name),
                                                  values, indices)
            if gathered is None:
                return push, None
            dense_shape = _local(scratch, assignment, var, facts, "dense_shape")
            return push, _sparse_mean(*gathered, dense_shape, assignment.num_replicas, divide)
        acc = tf.compat.v1.ConditionalAccumulator(assignment.analysis.grad_dtype(var.op_name), shape=facts.shape,
                                                  reduction_type="SUM", name="acc",
                                                  shared_name="{}/acc/{}".format(job, var.op_name))
        push = acc.apply_grad(_local(scratch, assignment, var, facts, "dense"), local_step=_ANY_STEP, name="push")
        if not assignment.node.is_chief:
            return push, None
        with tf.control_dependencies([push]):
            taken = acc.take_grad(assignment.node.num_tasks, name="take")
            return push, {"dense": divide(taken, assignment.num_replicas, name="mean")}


def _sparse_mean(values, indices, dense_shape, count, divide):
    return {"values": divide(values, count, name="mean_values"), "indices": indices, "dense_shape": dense_shape}


def _local_mean(scratch, var, assignment, facts, divide):
    count = len(assignment.local)
    with tf.device(assignment.local[0].device), tf.name_scope("AutoDist-PS/{}/".format(var.op_name)):
        if var.sparse:
            parts = (_local(scratch, assignment, var, facts, c) for c in ("values", "indices", "dense_shape"))
            return _sparse_mean(*parts, count, divide)
        return {"dense": divide(_local(scratch, assignment, var, facts, "dense"), count, name="mean")}


def _cast_like_original(result, assignment, var_op):
    """Sparse indices go back to the dtype the apply ops were built for."""
    parts = assignment.analysis.grad_tensors[var_op]
    if "indices" in result:
        dtype = assignment.analysis.graph.get_tensor_by_name(parts["indices"]).dtype
        result["indices"] = tf.cast(result["indices"], dtype)
    if "dense_shape" in result and "dense_shape" in parts:
        dtype = assignment.analysis.graph.get_tensor_by_name(parts["dense_shape"]).dtype
        result["dense_shape"] = tf.cast(result["dense_shape"], dtype)
    return result


def _token_queue(assignment, task):
    """Node ``task``'s token queue, on the chief: the chief's release is local, a node's wait joins its pushes."""
    with tf.device(host_cpu(assignment.node.chief_task)):   # (a sync group's view has its own job id)
        return tf.queue.FIFOQueue(_TOKEN_CAPACITY, [tf.int32], shapes=[[]],
                                  shared_name="{}/tokens/{}".format(assignment.node.job_id, task),
                                  name="tokens/queue_{}".format(task))


def synchronize_ps(editor, assignment):
    """Aggregate across nodes, wire the applying replica, disable the others; returns step ops."""
    if not assignment.ps_vars:
        return []
    buckets = [_Bucket(editor, assignment, number, members) for number, members in _fused(assignment)]
    fused = {var.op_name for bucket in buckets for var in bucket.members}
    scratch = editor.scratch()
    applied, pushes, global_sync = {}, [], []
    divide = _Divisors()
    with scratch.graph.as_default():
        for bucket in buckets:
            pushes.append(bucket.push(scratch, divide))
            global_sync += [var.op_name for var in bucket.members]
        for var in assignment.ps_vars:
            if var.op_name in fused:
                continue
            facts = assignment.analysis.variables[var.op_name]
            if wiring.is_global_sync(var, assignment):
                push, agg = _accumulate(scratch, var, assignment, facts, divide)
                pushes += [push] if push is not None else []
                global_sync.append(var.op_name)
            else:
                agg = _local_mean(scratch, var, assignment, facts, divide)
            if agg is not None:
                with tf.device(assignment.local[0].device):
                    agg = _cast_like_original(agg, assignment, var.op_name)
                applied[var.op_name] = {c: scratch.name_of(t) for c, t in agg.items()}
        step_op, (updated, writes) = _step_op(scratch, assignment, pushes, global_sync)
    scratch.commit()
    editor.add_control_inputs(updated, writes)
    for bucket in buckets:
        applied.update(bucket.unpack(editor, scratch))
    _wire(editor, assignment, applied, global_sync, step_op)
    return [step_op] + staleness.barrier(editor, assignment, step_op)


def _fused(assignment):
    """``[(bucket number, [its variables])]`` of this view's pushes fused by ``contract.fused_pushes``."""
    analysis = assignment.analysis
    pieces = []
    for var in assignment.ps_vars:
        facts = analysis.variables[var.op_name]
        dtype = analysis.grad_dtype(var.op_name)
        known = facts.shape.is_fully_defined()
        nbytes = facts.shape.num_elements() * dtype.size if known else math.inf
        fusable = known and not var.sparse and wiring.is_global_sync(var, assignment)
        pieces.append((var.op_name, var.synchronizer.destination, dtype.name, nbytes, fusable))
    buckets = fused_pushes(pieces)
    by_op = {var.op_name: var for var in assignment.ps_vars}
    members = {}
    for op_name, number in buckets.items():
        members.setdefault(number, []).append(by_op[op_name])
    return sorted(members.items())


class _Bucket:
    """A fused push (``contract.fused_pushes``): the members' local gradients packed into one vector on the
    node (``packing``), one accumulator on their server, and on the chief the mean split back::

        node k:  g_a, g_b, ... --pack--> flat --push--> [accumulator on PS] <--push-- chief: flat
        chief:   take(W) / R --unpack--> mean_a, mean_b, ...  (each feeds its variable's update)
    """

    def __init__(self, editor, assignment, number, members):
        self.assignment, self.members = assignment, members
        analysis = assignment.analysis
        self.dtype = analysis.grad_dtype(members[0].op_name)
        self.shapes = [analysis.variables[var.op_name].shape for var in members]
        self.destination = members[0].synchronizer.destination
        self.scope = "{}{}/".format(sync_scope("AutoDist-PS-Fused/", assignment.group), number)
        self.shared_name = "{}/acc/fused/{}".format(assignment.node.job_id, number)
        grads = [_local_name(assignment, var, "dense") for var in members]
        self.flat, _ = packing.pack(editor, grads, self.dtype, self.shapes, self.scope, assignment.local[0].device)
        self.mean = None

    def push(self, scratch, divide):
        """The push of this node's packed gradients; on the chief, also the take and the mean."""
        node = self.assignment.node
        total = sum(shape.num_elements() for shape in self.shapes)
        with tf.device(self.destination), tf.name_scope(self.scope):
            acc = tf.compat.v1.ConditionalAccumulator(self.dtype, shape=[total], reduction_type="SUM", name="acc",
                                                      shared_name=self.shared_name)
            push = acc.apply_grad(scratch.tensor(self.flat), local_step=_ANY_STEP, name="push")
            if node.is_chief:
                with tf.control_dependencies([push]):
                    self.mean = divide(acc.take_grad(node.num_tasks, name="take"), self.assignment.num_replicas,
                                       name="mean")
        return push

    def unpack(self, editor, scratch):
        """``{variable: {"dense": its mean}}`` on the chief (after the scratch's commit), else ``{}``."""
        if self.mean is None:
            return {}
        pieces, _ = packing.unpack(editor, scratch.name_of(self.mean), self.dtype, self.shapes, self.scope,
                                   self.destination)
        return {var.op_name: {"dense": piece} for var, piece in zip(self.members, pieces)}


def _applier_writes(assignment, var_ops):
    prefix = assignment.local[0].prefix
    return [prefix + op for var in var_ops for op in wiring.state_writes(assignment, var)]


def _step_op(scratch, assignment, pushes, global_sync):
    """The op a step waits for: updates applied here, released (chief) or awaited (others); and
    ``(updated, writes)``: an op that must wait for the applier's ``writes``, to be added after the
    commit (a stand-in per write cost as much as the rest of the pass for 10k variables)."""
    local_appliers = [v.op_name for v in assignment.ps_vars if v.op_name not in global_sync]
    writes = _applier_writes(assignment, local_appliers)
    with tf.name_scope(sync_scope("AutoDist-PS/", assignment.group)):
        if global_sync and assignment.node.is_chief:
            writes += _applier_writes(assignment, global_sync)
            updated = tf.no_op(name="updated")
            after = [updated] + proxy.refresh_everywhere(scratch, assignment, global_sync, [updated])
            with tf.control_dependencies(after):
                enqueues = [_token_queue(assignment, task).enqueue(0, name="release_{}".format(task))
                            for task in range(assignment.node.num_tasks) if task != assignment.node.task_index]
            return tf.group(*enqueues, name="release").name, (updated.name, writes)
        updated = tf.no_op(name="updated")
        if global_sync:
            with tf.control_dependencies(pushes + [updated]):
                token = _token_queue(assignment, assignment.node.task_index).dequeue(name="wait")
                return tf.group(token, name="waited").name, (updated.name, writes)
        with tf.control_dependencies([updated]):
            return tf.no_op(name="applied").name, (updated.name, writes)


def _wire(editor, assignment, applied, global_sync, step_op):
    for var in assignment.ps_vars:
        applier = None
        if var.op_name in applied:
            applier = assignment.local[0].prefix
            wiring.reroute_gradient(editor, assignment.analysis, var.op_name, applier, applied[var.op_name])
            # Every write of the variable's state waits for the aggregated gradient, also one that does not
            # read it (AdamW's decay): only then has every replica of the job read the variable this step.
            gradient_ops = sorted({op_of(t) for t in applied[var.op_name].values()})
            for write in wiring.state_writes(assignment, var.op_name):
                editor.add_control_inputs(applier + write, gradient_ops)
        for replica in assignment.local:
            if replica.prefix != applier:
                wiring.disable_writes(editor, assignment, var.op_name, replica.prefix, [step_op])
