"""What the kernels need to know about a single-device training graph.

The ops of a captured graph fall into three parts, which the kernels treat
differently:

    creation   variables and what initializes them (VarHandleOp, its
               initializer closure, the IsInitialized and snapshot reads)
    compute    forward and backward pass: every ancestor of a gradient
    apply      what the optimizer added: ancestors of the train ops that are
               neither compute nor creation (update ops, slot updates, the
               optimizer's own state such as Adam's beta powers or Keras'
               iteration counter)

For each variable with a gradient, ``GraphAnalysis`` also records where the
gradient enters the apply part (consumer op, input index), which ops in the
apply part write which variable, and the variable's *slots*: the other
variables whose updates depend on its gradient (Adam's m and v, Momentum's
accumulator). A parameter-server variable and its slots live together on the
server and are written by exactly one apply per step.

Some optimizer options make one variable's update depend on the gradients of
others (``global_clipnorm``'s norm, loss scaling's "every gradient is
finite"): those variables are *coupled*. State written from several coupled
gradients that is not any one variable's slot (a loss scale, a step counter
that counts only finite steps) is *shared state*, kept with its first owner::

    g_a --+--> norm --> clip(g_a) --> a -= ...        a, b coupled (one group)
    g_b --+            clip(g_b) --> b -= ...
    g_a, g_b --> finite --> scale = where(finite, ...)   scale: shared by a and b
    g_a --> m_a = ... --> a -= f(m_a)                     m_a: a's slot (read into a's update only)
"""
import dataclasses
import functools
from typing import Dict, FrozenSet, List, Tuple

import tensorflow as tf

from autodist.errors import TransformError
from autodist.capture.datasets.uneven import STATE as INPUT_STATE
from autodist.capture.queries import is_variable_write
from autodist.kernel.walks import ancestors, forward_ops, resource_source, resource_users

__all__ = ["VariableFacts", "GradInput", "GraphAnalysis", "analyze", "apply_subgraph"]


@dataclasses.dataclass(frozen=True)
class VariableFacts:
    op_name: str
    name: str
    dtype: tf.DType
    shape: tf.TensorShape
    trainable: bool
    initializer: str
    snapshot: str
    creation_ops: FrozenSet[str]


@dataclasses.dataclass(frozen=True)
class GradInput:
    """A gradient component consumed by an apply op: ``consumer.inputs[index]``."""

    consumer: str
    index: int
    component: str  # "dense", "values", "indices" or "dense_shape"


ITERATOR_OP_TYPES = frozenset({
    "OneShotIterator", "Iterator", "IteratorV2", "AnonymousIterator", "AnonymousIteratorV2",
    "AnonymousIteratorV3", "MultiDeviceIterator",
})


@dataclasses.dataclass
class GraphAnalysis:
    graph: tf.Graph                 # the single-device graph analysed
    variables: Dict[str, VariableFacts]
    creation_ops: FrozenSet[str]
    apply_ops: FrozenSet[str]
    train_ops: Tuple[str, ...]
    grad_inputs: Dict[str, List[GradInput]]
    grad_tensors: Dict[str, Dict[str, str]]
    sparse: Dict[str, bool]
    update_ops: Dict[str, str]
    writes: Dict[str, str]          # apply op name -> variable op it writes
    slots: Dict[str, Tuple[str, ...]]
    shared_state: Dict[str, Tuple[str, ...]] = dataclasses.field(default_factory=dict)  # state -> its owners
    couplings: Tuple[FrozenSet[str], ...] = ()   # groups of variables whose updates read each other's gradients
    input_pipeline: FrozenSet[str] = frozenset()  # iterators, their datasets and initializers
    state_ops: Dict[str, FrozenSet[str]] = dataclasses.field(default_factory=dict)
    deterministic: FrozenSet[str] = frozenset()   # variables every process initializes identically

    def grad_dtype(self, var_op):
        """The dtype of ``var_op``'s gradient (its values), which may be narrower than the variable's."""
        parts = self.grad_tensors[var_op]
        return self.graph.get_tensor_by_name(parts.get("dense") or parts["values"]).dtype

    def owned_state(self, var_op):
        """``var_op``'s slots and the shared state it keeps (shared state goes with its first owner)."""
        return tuple(self.slots[var_op]) + tuple(s for s, owners in sorted(self.shared_state.items())
                                                 if owners[0] == var_op)

    @functools.cached_property
    def writes_by_target(self):
        """Variable op -> the apply ops that write it (``writes`` inverted, computed once)."""
        by_target = {}
        for op, target in self.writes.items():
            by_target.setdefault(target, []).append(op)
        return by_target


def _variable_facts(graph, var_def):
    handle = graph.get_tensor_by_name(var_def.variable_name)
    var_op = handle.op
    initializer = graph.get_operation_by_name(var_def.initializer_name)
    creation = ancestors([initializer])
    creation.add(var_op)
    for consumer in handle.consumers():
        if consumer.type == "VarIsInitializedOp":
            creation.update(ancestors([consumer]) - {var_op} | {consumer})
    snapshot = var_def.snapshot_name.split(":")[0] if var_def.snapshot_name else ""
    if snapshot:
        creation.add(graph.get_operation_by_name(snapshot))
    dtype = var_op.get_attr("dtype") if var_op.type == "VarHandleOp" else handle.dtype.base_dtype
    shape = tf.TensorShape(var_op.get_attr("shape")) if var_op.type == "VarHandleOp" else handle.shape
    return VariableFacts(op_name=var_op.name, name=handle.name, dtype=tf.as_dtype(dtype), shape=shape,
                         trainable=var_def.trainable, initializer=initializer.name, snapshot=snapshot,
                         creation_ops=frozenset(op.name for op in creation))


def _components(grad):
    if isinstance(grad, tf.IndexedSlices):
        parts = {"values": grad.values, "indices": grad.indices}
        if grad.dense_shape is not None:
            parts["dense_shape"] = grad.dense_shape
        return parts
    return {"dense": grad}


def _input_pipeline(graph):
    """Iterator ops, the dataset ops they read and the ops that (re)initialize them.

    They are kept once per node, so the replicas' ``get_next`` ops draw
    different elements from one iterator instead of each replaying the data.
    """
    iterators = [op for op in graph.get_operations() if op.type in ITERATOR_OP_TYPES]
    if not iterators:
        return frozenset()
    roots = list(iterators)
    for iterator in iterators:
        roots.extend(c for c in iterator.outputs[0].consumers() if c.type in ("MakeIterator", "DeleteIterator"))
    return frozenset(op.name for op in ancestors(roots))


def analyze(item):
    """Classify the ops of a single-device GraphItem (see the module docstring)."""
    graph = item.graph
    variables = {}
    for var_def in item.info.variables:
        facts = _variable_facts(graph, var_def)
        variables[facts.op_name] = facts
    creation = frozenset().union(*(v.creation_ops for v in variables.values())) if variables else frozenset()
    grad_info = item.var_op_name_to_grad_info
    for var_op in grad_info:
        if var_op not in variables:
            raise TransformError("has a gradient but is not in the GraphItem's variables; call "
                                 "graph_item.prepare() after building the graph", pass_name="analysis",
                                 variable=var_op)
    grads = {name: _components(grad) for name, (grad, _, _) in grad_info.items()}
    grad_ops = [t.op for parts in grads.values() for t in parts.values()]
    train_ops = [graph.get_operation_by_name(n) for n in item.train_op_names]
    roots = train_ops or [update for _, _, update in grad_info.values()]
    compute = ancestors(grad_ops)
    apply_ops = frozenset(op.name for op in ancestors(roots) - compute if op.name not in creation)
    result = _link(item, variables, creation, apply_ops, train_ops, grads, grad_info)
    result.input_pipeline = _input_pipeline(graph) - creation
    touching = resource_users(graph, apply_ops)
    result.state_ops = {v: _state_ops(result, v, touching) for v in grads}
    result.deterministic = frozenset(v for v in variables if _deterministic(graph, variables[v]))
    return result


_RANDOM_MARKS = ("Random", "Multinomial", "TruncatedNormal", "Shuffle", "ParameterizedTruncatedNormal")


def _deterministic(graph, facts):
    """Whether every process computes the same initial value for the variable.

    Not when its initializer draws random numbers (each process builds its own
    graph, with its own seeds) or reads another variable.
    """
    for name in facts.creation_ops:  # the initializer's ancestors, among others
        op = graph.get_operation_by_name(name)
        if any(mark in op.type for mark in _RANDOM_MARKS):
            return False
        if op.type in ("VarHandleOp", "VariableV2") and op.name != facts.op_name:
            return False
    return True


def apply_subgraph(analysis, var_op, graph=None, users=None):
    """``(ops, writes)``: the apply ops that compute or write ``var_op``'s and its slots' updates.

    An op belongs when it is reached from the variable's gradient (or reads
    the variable or a slot, or is reached from such a read) and leads to one
    of their writes (a read feeding only other state, an EMA of the weights,
    does not belong). Ops
    of ``graph`` (default: the analysed graph) of the same names; ``users`` is
    ``resource_users(graph, analysis.apply_ops)``, computed here when not given.
    """
    graph = graph if graph is not None else analysis.graph
    users = users if users is not None else resource_users(graph, analysis.apply_ops)
    state = {var_op} | set(analysis.slots[var_op])
    touching = set()
    for name in sorted(state):
        touching |= {graph.get_operation_by_name(op.name) for op in users.get(name, ())}
    writes = {op for op in touching if analysis.writes.get(op.name) in state}
    starts = [graph.get_tensor_by_name(t) for t in analysis.grad_tensors[var_op].values()]
    starts += [t for op in touching for t in op.outputs]
    forward = forward_ops(starts, analysis.apply_ops)
    backward, stack = set(), list(writes)
    while stack:
        op = stack.pop()
        if op in backward or op.name not in analysis.apply_ops:
            continue
        backward.add(op)
        stack.extend(t.op for t in op.inputs)
    return ((forward | touching) & backward) | writes, writes


def _state_ops(analysis, var_op, users):
    """Apply ops that read or write ``var_op``'s state (it, its slots, shared state it keeps) on the way to
    writing it, and everything computed from them on that way.

    A replica that does not apply the variable's update runs none of these.
    A read of the variable that feeds only other state (an EMA of the weights,
    ordered after the update) is not among them: every replica keeps its own
    copy of that state up to date. The set is closed under data consumers: an
    op whose output is used outside it (rare: a fetched optimizer internal) is
    left out together with everything it is computed from, so the graph stays
    valid.
    """
    owned = {var_op} | set(analysis.owned_state(var_op))
    apply_ops = analysis.apply_ops
    touching = set().union(*(users.get(v, set()) for v in owned))
    writes = {op for op in touching if analysis.writes.get(op.name) in owned}
    leading, stack = set(), list(writes)
    while stack:
        op = stack.pop()
        if op in leading or op.name not in apply_ops:
            continue
        leading.add(op)
        stack.extend(t.op for t in op.inputs)
    members, stack = set(), list(touching & leading)
    while stack:
        op = stack.pop()
        if op in members:
            continue
        members.add(op)
        stack.extend(c for t in op.outputs for c in t.consumers() if c.name in apply_ops and c in leading)
    changed = True
    while changed:
        changed = False
        for op in list(members):
            if any(c not in members for t in op.outputs for c in t.consumers()):
                members.discard(op)
                changed = True
    return frozenset(op.name for op in members)


def _link(item, variables, creation, apply_ops, train_ops, grads, grad_info):
    graph = item.graph
    writes = {}
    for name in apply_ops:
        op = graph.get_operation_by_name(name)
        if is_variable_write(op) and op.inputs:
            writes[name] = resource_source(op.inputs[0]).name
    grad_inputs, reached = {}, {}
    for var_op, parts in grads.items():
        entries = []
        for component, tensor in parts.items():
            for consumer in tensor.consumers():
                if consumer.name in apply_ops:
                    entries.extend(GradInput(consumer.name, i, component)
                                   for i, t in enumerate(consumer.inputs) if t is tensor)
        grad_inputs[var_op] = entries
        reached[var_op] = forward_ops(list(parts.values()), apply_ops)
    slots, shared = _slots(graph, variables, apply_ops, writes, _with_reads(graph, reached, apply_ops))
    return GraphAnalysis(
        graph=graph, variables=variables, creation_ops=creation, apply_ops=apply_ops,
        train_ops=tuple(op.name for op in train_ops), grad_inputs=grad_inputs,
        grad_tensors={v: {c: t.name for c, t in parts.items()} for v, parts in grads.items()},
        sparse={v: "values" in parts for v, parts in grads.items()},
        update_ops={v: update.name for v, (_, _, update) in grad_info.items()},
        writes=writes, slots=slots, shared_state=shared,
        # every update reads the input progress's mean (kernel.uneven_inputs): not a coupling between the variables
        couplings=_couplings({v: ops for v, ops in reached.items() if v != INPUT_STATE}))


def _with_reads(graph, reached, apply_ops):
    """``reached`` plus, per variable, the apply ops reached from its own reads there (an EMA of the weights
    is written from the updated weights: it is the variable's state, updated where the variable is)."""
    users = resource_users(graph, apply_ops)
    out = {}
    for var_op, ops in reached.items():
        reads = [op for op in users.get(var_op, ()) if not is_variable_write(op)]
        out[var_op] = ops | forward_ops([t for op in reads for t in op.outputs], apply_ops)
    return out


def _slots(graph, variables, apply_ops, writes, reached):
    """``(slots, shared state)`` from the writes each gradient reaches (see the module docstring).

    A state variable written from one variable's gradient (or from its value:
    a moving average of it) is that variable's slot. Written from several (a coupling passes through it), it is the slot
    of the one variable whose update reads it (Adam's m under a global norm),
    else shared state of all of them.
    """
    candidates = {}
    for var_op, ops in reached.items():
        for op in ops:
            if not is_variable_write(op):
                continue
            owned = {writes[op.name]} | {resource_source(t).name for t in op.inputs if t.dtype == tf.resource}
            for state in owned:
                if state != var_op and state in variables and state not in reached:
                    candidates.setdefault(state, set()).add(var_op)
    slots, shared = {v: [] for v in reached}, {}
    users = resource_users(graph, apply_ops) if any(len(o) > 1 for o in candidates.values()) else {}
    for state, owners in sorted(candidates.items()):
        if len(owners) > 1:
            readers = {v for v in owners if _read_into(graph, state, v, users, apply_ops, writes)}
            owners = readers if len(readers) == 1 else owners
        if len(owners) == 1:
            slots[next(iter(owners))].append(state)
        else:
            shared[state] = tuple(sorted(owners))
    return {v: tuple(sorted(s)) for v, s in slots.items()}, shared


def _read_into(graph, state, var_op, users, apply_ops, writes):
    """Whether ``state`` is an input of ``var_op``'s update: a resource of its write, or read into it."""
    targets = {graph.get_operation_by_name(name) for name, target in writes.items() if target == var_op}
    if any(resource_source(t).name == state for op in targets for t in op.inputs if t.dtype == tf.resource):
        return True
    reads = [op for op in users.get(state, ()) if not is_variable_write(op)]
    return bool(forward_ops([t for op in reads for t in op.outputs], apply_ops) & targets)


def _couplings(reached):
    """Groups (of two or more) of variables some apply op of which two or more gradients reach."""
    group = {v: {v} for v in reached}
    by_op = {}
    for var_op, ops in reached.items():
        for op in ops:
            by_op.setdefault(op, []).append(var_op)
    for owners in by_op.values():
        merged = set().union(*(group[v] for v in owners))
        for v in merged:
            group[v] = merged
    return tuple(sorted({frozenset(g) for g in group.values() if len(g) > 1}, key=sorted))
