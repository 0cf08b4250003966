"""Replicate: one copy of the single-device graph per local replica.

    single-device graph                 this node's graph (2 local replicas)
    W (ps variable) ---------------->   W                         (shared, on its server)
    x -> MatMul(x, W) -> loss  ----->   AutoDist-Replica-0/x -> .../MatMul(.., W) -> .../loss
                                        AutoDist-Replica-1/x -> .../MatMul(.., W) -> .../loss
    b (mirrored) ------------------->   AutoDist-Replica-0/b, AutoDist-Replica-1/b

Parameter-server variables, their slots and their initializers are kept once
(``assignment.shared_ops``); every other op is copied with its name prefixed by
``AutoDist-Replica-<i>/`` and placed on the replica's device, or with the
parameter-server variable it reads, writes or computes the update of (see
``device.replica_device``). Inputs and control inputs that name a copied op
are renamed to the same replica's copy; those naming a shared op keep the
name. Colocation entries survive only between copies of one replica. The pass works on NodeDefs (one import for the whole job,
later) and returns a new GraphDef-backed GraphItem.
"""
import copy as _copy

from tensorflow.core.framework import graph_pb2

from autodist.capture.info import Info
from autodist.capture.graph_item import GraphItem, GradRecord
from autodist.kernel.base import Pass, PassResult
from autodist.kernel.device import ps_apply_devices, replica_device
from autodist.kernel.graph_def_edit import index_of

__all__ = ["Replicator", "replicated_name"]

def replicated_name(name, prefix, shared):
    """Rename a node reference ("x", "x:1", "^x") into ``prefix``'s copy unless it is shared."""
    control = name.startswith("^")
    bare = name[1:] if control else name
    op = bare.split(":")[0]
    if op in shared:
        return name
    return ("^" if control else "") + prefix + bare


class Replicator(Pass):
    """The replicate pass (see the module docstring)."""

    name = "replicate"
    requires = ("assign",)

    def __init__(self, assignment):
        self.assignment = assignment

    def __call__(self, item):
        assignment = self.assignment
        source = item.graph_def
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(source.versions)
        out.library.CopyFrom(source.library)
        shared = assignment.shared_ops
        resources = {op: assignment.vars[owner].synchronizer.destination
                     for op, owner in assignment.ps_state.items()}
        resources.update((op, assignment.shared_devices[op]) for op in assignment.analysis.input_pipeline)
        updates = ps_apply_devices(assignment)
        for node in source.node:
            if node.name in shared:
                copy = out.node.add()
                copy.CopyFrom(node)
                copy.device = assignment.shared_devices[node.name]
                continue
            resource_device = _resource_device(node, resources) or updates.get(node.name)
            for replica in assignment.local:
                self._copy_node(out.node.add(), node, replica, shared, resource_device)
        result = GraphItem(graph_def=out)
        result._positions = index_of(out)
        result.info = _replicated_info(item.info, assignment)
        result.add_grad_records(_replicated_records(item, assignment.local[0].prefix, shared))
        result.extend_train_ops(r.prefix + name for r in assignment.local for name in item.train_op_names)
        result.extend_optimizer_info(item.optimizer, *item.optimizer_args, **item.optimizer_kwargs) \
            if item.optimizer is not None else None
        return PassResult(result)

    @staticmethod
    def _copy_node(copy, node, replica, shared, resource_device):
        copy.CopyFrom(node)
        prefix = replica.prefix
        copy.name = prefix + node.name
        if node.input:
            copy.input[:] = [replicated_name(i, prefix, shared) for i in node.input]
        copy.device = replica_device(node, replica, resource_device)
        if "_class" in node.attr:
            # A copy is colocated with the same replica's copies only: colocation with
            # a shared op (tf1 Adam puts its beta powers with the first variable) would
            # pull every replica's copy onto that op's server, where they would collide.
            kept = [b"loc:@" + prefix.encode() + v[5:] for v in node.attr["_class"].list.s
                    if v.startswith(b"loc:@") and v[5:].decode() not in shared]
            if kept:
                copy.attr["_class"].list.s[:] = kept
            else:
                del copy.attr["_class"]
        if "shared_name" in node.attr and node.attr["shared_name"].s:
            copy.attr["shared_name"].s = copy.name.encode()
        if node.op in ("Enter", "RefEnter"):
            copy.attr["frame_name"].s = prefix.encode() + node.attr["frame_name"].s


def _resource_device(node, resources):
    """Where a shared resource this node uses lives (a parameter-server variable, an iterator), if any."""
    for entry in node.input:
        if entry.startswith("^"):
            continue
        op = entry.split(":")[0]
        if op in resources:
            return resources[op]
    return None


def _rename_var_def(var_def, prefix):
    renamed = _copy.deepcopy(var_def)
    for field in ("variable_name", "initial_value_name", "initializer_name", "snapshot_name"):
        value = getattr(var_def, field)
        if value:
            setattr(renamed, field, prefix + value)
    return renamed


def _replicated_info(info, assignment):
    result = Info()
    shared_vars = set(assignment.ps_state)
    for var_def in info.variables:
        op_name = var_def.variable_name.split(":")[0]
        if op_name in shared_vars:
            result.variables.append(_copy.deepcopy(var_def))
        else:
            result.variables.extend(_rename_var_def(var_def, r.prefix) for r in assignment.local)
    result.table_initializers = [r.prefix + name for r in assignment.local for name in info.table_initializers]
    return result


def _replicated_records(item, prefix, shared):
    def rename(name):
        return replicated_name(name, prefix, shared) if name else name
    return [GradRecord(target=rename(r.target), grad=rename(r.grad), indices=rename(r.indices),
                       values=rename(r.values), dense_shape=rename(r.dense_shape), update_op=rename(r.update_op))
            for r in item.grad_records]
