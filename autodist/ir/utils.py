"""Whole-graph passes over an IRGraph: topological order, pruning, consumer index.

Both ``topologic_order_graph`` and ``prune_graph`` follow data edges and control
edges (``OperationInfo.control_inputs``), run iteratively (no recursion limit at
100k ops) and are linear in ops + edges.
"""
import contextlib
import gc
import itertools

from autodist.ir.graph import IRGraph

__all__ = ["topologic_order_graph", "prune_graph", "consumer_map", "predecessors", "gc_paused", "gc_frozen"]

_ON_STACK, _DONE = 1, 2


@contextlib.contextmanager
def gc_paused():
    """Suspend the cyclic garbage collector while building many objects at once.

    Building a 100k-op graph allocates ~1M objects that all stay alive; each
    automatic collection would re-scan the growing heap for nothing (measured:
    about a third of ``from_graph_def``'s time). The previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def gc_frozen():
    """Keep the cyclic garbage collector off the objects that exist when the block starts (``gc.freeze``).

    For work that makes and drops many short-lived objects next to a large
    heap that outlives it: planning a graph of 10k variables walks ~1.7M live
    objects (the graph, the capture) at every full collection: AutoStrategy's
    plan took 7.7 s against 5.1 s frozen (``benchmarks/plan_gc.py``). Unlike
    ``gc_paused``, the block's own garbage is still collected. A heap that is
    already frozen (by the caller, or by an outer block) or a collector that
    is off is left as it is; otherwise the heap is unfrozen at the end.
    """
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def predecessors(op):
    """Names of the ops that must run before ``op``: data producers, then control inputs."""
    names = [t.op_name for t in op.input_tensors if t.op_name is not None]
    names.extend(op.control_inputs)
    return names


def topologic_order_graph(ugraph):
    """Set ``ugraph.topo_order`` in place to a topological order of all its ops.

    Depth-first from ``output_nodes`` (in order), then from the other ops in
    ``ops_info`` order; each op comes after everything it depends on. The order
    is deterministic, and a graph whose ``ops_info`` is already in this order
    keeps it. Raises ValueError on a cycle (naming it) or a missing producer.
    """
    _check(ugraph, "topologic_order_graph")
    ops_info = ugraph.ops_info
    _check_outputs(ugraph, ugraph.output_nodes, "topologic_order_graph")
    with gc_paused():
        ugraph.topo_order = _depth_first_order(ugraph.output_nodes, ops_info)


def _depth_first_order(output_nodes, ops_info):
    state, order = {}, []
    for root in itertools.chain(output_nodes, ops_info):
        if root in state:
            continue
        state[root] = _ON_STACK
        stack = [(root, iter(predecessors(ops_info[root])))]
        while stack:
            name, pending = stack[-1]
            for pred in pending:
                mark = state.get(pred)
                if mark is None:
                    op = ops_info.get(pred)
                    if op is None:
                        raise ValueError(_missing(name, pred, "topologic_order_graph"))
                    state[pred] = _ON_STACK
                    stack.append((pred, iter(predecessors(op))))
                    break
                if mark == _ON_STACK:
                    raise ValueError(_cycle_message(stack, pred))
            else:
                stack.pop()
                state[name] = _DONE
                order.append(name)
    return order


def _cycle_message(stack, pred):
    chain = [name for name, _ in stack]
    chain = chain[chain.index(pred):]
    # stack[i + 1] feeds stack[i]; print the cycle in data-flow order.
    flow = [pred] + chain[:0:-1] + [pred]
    return "topologic_order_graph: the graph has a cycle: {}".format(" -> ".join(flow))


def _missing(consumer, producer, where):
    return "{}: op {!r} depends on op {!r}, which is not in the graph".format(
        where, consumer, producer)


def _check(ugraph, where):
    if not isinstance(ugraph, IRGraph):
        raise TypeError("{}: expected an IRGraph, got {!r}".format(where, type(ugraph).__name__))


def _check_outputs(ugraph, output_nodes, where):
    missing = [name for name in output_nodes if name not in ugraph.ops_info]
    if missing:
        raise ValueError("{}: output nodes {} are not in the graph".format(where, missing))


def prune_graph(ugraph, output_nodes=None):
    """A new graph with exactly the ops ``output_nodes`` need (data and control edges).

    ``output_nodes`` defaults to ``ugraph.output_nodes``. The input graph is not
    modified; the result is topologically ordered and keeps the GraphDef extras.
    """
    _check(ugraph, "prune_graph")
    outputs = list(ugraph.output_nodes if output_nodes is None else output_nodes)
    _check_outputs(ugraph, outputs, "prune_graph")
    ops_info = ugraph.ops_info
    needed, stack = set(), list(outputs)
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        for pred in predecessors(ops_info[name]):
            if pred not in ops_info:
                raise ValueError(_missing(name, pred, "prune_graph"))
            if pred not in needed:
                stack.append(pred)
    pruned = IRGraph(outputs, lib_name=ugraph.lib_name)
    pruned.extras, pruned._null_count = ugraph.extras, ugraph._null_count
    with gc_paused():
        for name, op in ops_info.items():
            if name in needed:
                op._copy_to(pruned)
    topologic_order_graph(pruned)
    return pruned


def consumer_map(ugraph):
    """``{tensor name: [(consumer op, input index), ...]}`` over data edges, built in one pass."""
    _check(ugraph, "consumer_map")
    consumers = {}
    for op in ugraph.ops_info.values():
        for index, tensor in enumerate(op.input_tensors):
            consumers.setdefault(tensor.name, []).append((op, index))
    return consumers
