"""Partition: split variables into shards as the strategy says.

    single-device                         partitioned (W in 2 shards on axis 0)
    W ---read---> MatMul                  W/part_0, W/part_1 --read+concat--> MatMul
    W ---gather--> emb                    ids routed to shards, gathered, stitched
    g(W) --> Adam(W, m, v, g)             split(g) --> Adam(W/part_i, m/part_i, v/part_i, g_i)

The strategy's entries say which variables to split and how
(``contract.Partition``). Each partitioned variable and its optimizer slots
get shard variables ``<name>/part_<i>`` (``names.shard_name``); reads are
rebuilt from the shards; the gradient (dense or IndexedSlices) is split; the
part of the apply graph that updates the variable is cloned once per shard
with the graph editor (the optimizer's shared state, such as Adam's beta
powers, stays shared). The original writes become NoOps that wait for the
shards' writes, so train ops keep working, and the variable's other ops are
removed from the GraphDef. Every later pass sees the shards as ordinary
variables; the pass result's details say, per variable, how it was split
(``PartitionInfo``), for checkpoints and fetches.
"""
import dataclasses
from typing import Dict, Tuple

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from autodist import graph_editor as ge
from autodist.errors import TransformError
from autodist.capture.graph_item import GraphItem
from autodist.kernel import partition_ops as pops
from autodist.kernel import shard_apply
from autodist.kernel.analysis import analyze, apply_subgraph
from autodist.kernel.base import Pass, PassResult
from autodist.plan.names import shard_name

__all__ = ["Partitioner", "PartitionInfo"]


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """How one variable was split.

    ``shards`` are the shard variables' op names (``"emb/part_0"``...), in
    order along ``axis`` with ``sizes`` rows each; ``slots`` maps each of the
    variable's optimizer slots (single-device op name) to its shards' op
    names; ``aliases`` maps tensors of the single-device graph that no longer
    exist (the variable's reads) to the tensors standing for them (the shards
    concatenated), for fetches.
    """

    var_op: str
    axis: int
    shards: Tuple[str, ...]
    sizes: Tuple[int, ...]
    slots: Dict[str, Tuple[str, ...]]
    aliases: Dict[str, str]


class Partitioner(Pass):
    """The partition pass; its result's details are a PartitionInfo per split variable."""

    name = "partition"

    def __init__(self, entries):
        self.entries = entries

    def __call__(self, item):
        partitions = self.entries.partitions   # {variable op name: contract.Partition}
        if not partitions:
            return PassResult(item, {})
        analysis = analyze(item)
        work = item.copy()
        state = _Rewrite(work.graph, analysis)
        infos = {}
        with work.graph.as_default():
            for var_op in sorted(partitions):
                if var_op not in analysis.grad_tensors:
                    raise TransformError("is partitioned by the strategy but has no gradient",
                                         pass_name=self.name, variable=var_op)
                infos[var_op] = state.split(var_op, partitions[var_op])
        return PassResult(state.result(item, work), infos)


class _Rewrite:
    """Accumulates the edits of one partition pass over a working copy of the graph."""

    def __init__(self, graph, analysis):
        self.graph = graph
        self.analysis = analysis
        self.drop = set()
        self.noops = {}        # original write -> its shard copies
        self.removed_vars = set()
        self.new_vars = []
        self.records = {}      # var op -> [(grad, shard handle, update op)]

    def split(self, var_op, partition):
        facts = self.analysis.variables[var_op]
        if not facts.shape.is_fully_defined():
            raise TransformError("has no fully defined shape", pass_name="partition", variable=var_op)
        axis = partition.axis
        dim = facts.shape.as_list()[axis]
        sizes = list(partition.sizes(dim))
        if sum(sizes) != dim or min(sizes) < 1:
            raise TransformError("shard sizes {} do not split dimension {} of size {}".format(sizes, axis, dim),
                                 pass_name="partition", variable=var_op)
        if self.analysis.sparse[var_op] and axis != 0:
            raise TransformError("has sparse gradients and can only be split on axis 0", pass_name="partition",
                                 variable=var_op)
        state = [var_op] + list(self.analysis.slots[var_op])
        for slot in state[1:]:
            if self._var_def(slot).shape != facts.shape:
                raise TransformError("its optimizer slot '{}' has the shape {}, not the variable's {} (factored "
                                     "moments, as Adafactor keeps): the slot cannot be split with the variable; use "
                                     "a builder that does not partition it".format(
                                         slot, self._var_def(slot).shape, facts.shape),
                                     pass_name="partition", variable=var_op)
        shards = {s: self._shards(s, sizes, axis) for s in state}
        region = apply_subgraph(self.analysis, var_op, graph=self.graph)
        aliases = {}
        for s in state:
            aliases.update(self._rewire_reads(s, shards[s], sizes, axis, region[0]))
        grads = self._split_grad(var_op, sizes, axis)
        self._clone_apply(var_op, state, shards, grads, sizes, axis, region)
        return PartitionInfo(var_op=var_op, axis=axis, shards=tuple(v.op.name for v in shards[var_op]),
                             sizes=tuple(sizes), slots={s: tuple(v.op.name for v in shards[s]) for s in state[1:]},
                             aliases=aliases)

    def _var_def(self, var_op):
        return self.analysis.variables[var_op]

    def _shards(self, var_op, sizes, axis):
        facts = self._var_def(var_op)
        initial = self.graph.get_operation_by_name(facts.initializer).inputs[1]
        try:
            shards = pops.make_shards(var_op, initial, sizes, axis, facts.trainable, facts.dtype)
        except ValueError as e:
            raise TransformError(str(e), pass_name="partition", variable=var_op) from e
        self.removed_vars.add(var_op)
        # The variable's own ops go; its initial value stays (the shards slice it).
        handle = self.graph.get_tensor_by_name(facts.name)
        own = {facts.op_name, facts.initializer} | ({facts.snapshot} if facts.snapshot else set())
        own |= {c.name for c in handle.consumers() if c.name in facts.creation_ops}
        self.drop |= own
        self.new_vars.extend(shards)
        return shards

    def _rewire_reads(self, var_op, shards, sizes, axis, region):
        """Rebuild every read of ``var_op`` outside its update (``region``, cloned per shard) from its shards."""
        facts = self._var_def(var_op)
        handle = self.graph.get_tensor_by_name(facts.name)
        assembled = pops.assemble(shards, axis, var_op + "/AutoDist-Assembled")
        aliases = {}
        if facts.snapshot:
            snapshot = self.graph.get_operation_by_name(facts.snapshot).outputs[0]
            aliases[snapshot.name] = assembled.name
            if snapshot.consumers():
                ge.reroute_ts(assembled, snapshot)
        for consumer in list(handle.consumers()):
            if consumer.name in self.drop or consumer in region:
                continue
            replacement = self._replace_read(consumer, var_op, shards, sizes, axis)
            if replacement is not None:
                ge.reroute_ts(replacement, consumer.outputs[0])
                for waiting in consumer._control_outputs:   # e.g. a write ordered after this read
                    waiting._add_control_inputs([replacement.op])
            self.drop.add(consumer.name)
        return aliases

    def _replace_read(self, op, var_op, shards, sizes, axis):
        with tf.control_dependencies(op.control_inputs), tf.name_scope(op.name + "/AutoDist-Partitioned"):
            if op.type == "ReadVariableOp":
                return pops.assemble(shards, axis, "read")
            if op.type == "ResourceGather" and axis == 0:
                return pops.sharded_gather(shards, sizes, op.inputs[1], "gather")
            if op.type == "ResourceGather":
                return tf.gather(pops.assemble(shards, axis, "read"), op.inputs[1])
            if op.type == "VariableShape":
                return tf.constant(self._var_def(var_op).shape.as_list(), op.outputs[0].dtype)
            if op.type == "VarIsInitializedOp":
                return tf.reduce_all(tf.stack([s.is_initialized() for s in shards]))
            if op.type == "AssignVariableOp":
                pieces = tf.split(op.inputs[1], sizes, axis=axis)
                group = tf.group(*[s.assign(p, read_value=False) for s, p in zip(shards, pieces)])
                self.noops[op.name] = [group.name]
                return None
        raise TransformError("is used by op '{}' of type {}, which cannot read a partitioned variable"
                             .format(op.name, op.type), pass_name="partition", variable=var_op, op=op.name)

    def _split_grad(self, var_op, sizes, axis):
        parts = {c: self.graph.get_tensor_by_name(t) for c, t in self.analysis.grad_tensors[var_op].items()}
        scope = var_op + "/AutoDist-SplitGrad"
        if "dense" in parts:
            return [{"dense": g} for g in pops.split_dense(parts["dense"], sizes, axis, scope)]
        row_shape = self._var_def(var_op).shape.as_list()[1:]
        split = pops.split_sparse(parts["values"], parts["indices"], sizes, row_shape, scope)
        grads = []
        for values, indices, dense_shape in split:
            shard = {"values": values, "indices": indices}
            if "dense_shape" in parts:
                shard["dense_shape"] = tf.cast(dense_shape, parts["dense_shape"].dtype)
            grads.append(shard)
        return grads

    def _clone_apply(self, var_op, state, shards, grads, sizes, axis, region):
        """Clone the variable's update (``region``) per shard; ops that need the whole variable read the shards
        joined (``shard_apply``: a norm, a finite flag, a matrix product)."""
        ops, writes = region
        if not writes:
            raise TransformError("has no update op in the apply graph", pass_name="partition", variable=var_op)
        originals = {c: self.graph.get_tensor_by_name(t) for c, t in self.analysis.grad_tensors[var_op].items()}
        handles = {s: self.graph.get_tensor_by_name(self._var_def(s).name) for s in state}
        sparse = self.analysis.sparse[var_op]
        shard_plan = shard_apply.plan(ops, set(originals.values()) | set(handles.values()), set(writes), sparse,
                                      var_op)
        update = self.graph.get_operation_by_name(self.analysis.update_ops[var_op])
        sliced = {} if sparse else self._sliced_inputs(var_op, shard_plan, sizes, axis)
        copies = {w.name: [] for w in writes}
        records, infos = [], []
        for i, grad in enumerate(grads):
            replacements = {originals[c]: grad[c] for c in originals}
            replacements.update((handles[s], shards[s][i].handle) for s in state)
            replacements.update((t, pieces[i]) for t, pieces in sliced.items())
            _, info = ge.copy_with_input_replacements(ge.sgv(sorted(shard_plan.sharded, key=lambda o: o._id)),
                                                      replacements, dst_graph=self.graph,
                                                      dst_scope=shard_name(var_op, i) + "/AutoDist-Apply")
            infos.append(info)
            for w in writes:
                copies[w.name].append(info.transformed(w).name)
            records.append((_grad_value(grad), shards[var_op][i], info.transformed(update)))
        self._join_for_whole_ops(var_op, shard_plan, infos, originals, grads, axis)
        self.records[var_op] = records
        for w in writes:
            self.noops[w.name] = copies[w.name]
        self.drop |= {op.name for op in _unused(shard_plan.sharded, set(writes))}

    def _sliced_inputs(self, var_op, shard_plan, sizes, axis):
        """{input of a sharded op that has the variable's full size along the split axis: its pieces}."""
        facts = self._var_def(var_op)
        rank, dim = facts.shape.rank, facts.shape.as_list()[axis]
        sliced = {}
        for op in shard_plan.sharded:
            for position, t in enumerate(op.inputs):
                if t in shard_plan.tensors or t.dtype == tf.resource or t in sliced or \
                        shard_apply.passed_through(op, position, shard_plan.tensors):
                    continue
                try:
                    index = shard_apply.slice_index(t, axis, rank, dim)
                except ValueError as e:
                    raise TransformError("op '{}' reads '{}', which {}: its update cannot run per shard"
                                         .format(op.name, t.name, e), pass_name="partition", variable=var_op,
                                         op=op.name) from None
                if index is not None:
                    with tf.name_scope(var_op + "/AutoDist-SliceForShards"):
                        sliced[t] = tf.split(t, sizes, axis=index)
        return sliced

    def _join_for_whole_ops(self, var_op, shard_plan, infos, originals, grads, axis):
        """Feed each op that needs the whole variable the shards' values joined along the split axis."""
        by_original = {t: [g[c] for g in grads] for c, t in originals.items()}
        joined = {}
        for op in sorted(shard_plan.whole, key=lambda o: o._id):
            for index, t in enumerate(op.inputs):
                if t in by_original:
                    pieces = by_original[t]
                elif t in shard_plan.tensors:
                    pieces = [info.transformed(t) for info in infos]
                else:
                    continue
                if t not in joined:
                    with tf.name_scope(var_op + "/AutoDist-Joined"):
                        joined[t] = tf.concat(pieces, axis=0 if self.analysis.sparse[var_op] else axis)
                op._update_input(index, joined[t])

    def result(self, item, work):
        """The partitioned GraphItem (GraphDef-backed) with shard records and info."""
        graph_def = _prune(work.graph.as_graph_def(), self.drop, self.noops)
        out = GraphItem(graph_def=graph_def)
        out.info = item.info.copy()
        for var_op in self.removed_vars:
            out.info.pop_variable(var_op)
        out.info.update_variables(self.new_vars, replace=False)
        records = [r for r in item.grad_records if r.target.split(":")[0] not in self.records]
        out.add_grad_records(records)
        for var_op in sorted(self.records):
            grads, targets, updates = zip(*self.records[var_op])
            out.extend_gradient_info(grads, targets, updates)
        out.extend_train_ops(item.train_op_names)
        if item.optimizer is not None:
            out.extend_optimizer_info(item.optimizer, *item.optimizer_args, **item.optimizer_kwargs)
        return out


def _unused(candidates, writes):
    """The ops among ``candidates`` but ``writes`` (they become NoOps) that nothing else reads any more.

    Their clones replace them. An op read by a kept op stays (an IdentityN all
    gradients pass through is kept for the other variables, and so is what
    feeds it).
    """
    dropped = set(candidates) | set(writes)
    changed = True
    while changed:
        changed = False
        for op in list(dropped):
            if any(c not in dropped for t in op.outputs for c in t.consumers()):
                dropped.discard(op)
                changed = True
    return dropped - set(writes)


def _grad_value(grad):
    if "dense" in grad:
        return grad["dense"]
    return tf.IndexedSlices(grad["values"], grad["indices"], grad.get("dense_shape"))


def _prune(graph_def, drop, noops):
    """Drop ``drop``; turn ``noops`` into NoOps waiting for their replacements; check what is left."""
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in drop and node.name not in noops:
            continue
        copy = out.node.add()
        copy.CopyFrom(node)
        controls = [i for i in node.input if i.startswith("^") and i[1:] not in drop]
        if node.name in noops:
            device = node.device
            copy.Clear()
            copy.name, copy.op, copy.device = node.name, "NoOp", device
            copy.input.extend(controls + ["^" + n for n in noops[node.name]])
            continue
        data = [i for i in node.input if not i.startswith("^")]
        for entry in data:
            if entry.split(":")[0] in drop:
                raise TransformError("op '{}' still reads '{}', which partitioning removed".format(node.name, entry),
                                     pass_name="partition", op=node.name)
        copy.input[:] = data + controls
        if "_class" in node.attr:
            kept = [v for v in node.attr["_class"].list.s if v[5:].decode() not in drop]
            if kept:
                copy.attr["_class"].list.s[:] = kept
            else:
                del copy.attr["_class"]
    return out
