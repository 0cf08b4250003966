"""Rerouting: re-plugging existing tensors into other consumers, in place.

Every function here MUTATES the graph (``op._update_input`` / control edges):
ops are never created or copied. Sessions that already ran the graph do not
see the change; open a new ``tf.compat.v1.Session`` afterwards.

Vocabulary: ``reroute_*(a, b)`` moves the consumers of ``b`` onto ``a``
(``a`` wins, ``b`` is left dangling); ``swap_*(a, b)`` exchanges them.
"""
import tensorflow as tf

from autodist.graph_editor import subgraph
from autodist.graph_editor import util

__all__ = [
    "swap_ts",
    "reroute_ts",
    "swap_inputs",
    "reroute_inputs",
    "swap_outputs",
    "reroute_outputs",
    "swap_ios",
    "reroute_ios",
    "remove_control_inputs",
    "add_control_inputs",
]


def _check_ts_compatibility(ts0, ts1):
    if len(ts0) != len(ts1):
        raise ValueError("cannot pair {} tensors with {} tensors".format(len(ts0), len(ts1)))
    for t0, t1 in zip(ts0, ts1):
        if not t0.dtype.is_compatible_with(t1.dtype):
            raise ValueError("cannot reroute {} ({}) and {} ({}): dtypes differ".format(
                t0.name, t0.dtype.name, t1.name, t1.dtype.name))
        if not t0.get_shape().is_compatible_with(t1.get_shape()):
            raise ValueError("cannot reroute {} {} and {} {}: shapes are incompatible".format(
                t0.name, t0.get_shape(), t1.name, t1.get_shape()))


def _op_filter(can_modify, cannot_modify):
    can = None if can_modify is None else set(util.make_list_of_op(can_modify))
    cannot = set() if cannot_modify is None else set(util.make_list_of_op(cannot_modify))
    return lambda op: (can is None or op in can) and op not in cannot


def _apply_moves(moves):
    """Move consumers: ``moves`` is a list of ``(old_t, new_t, may_modify_fn)``.

    All decisions are taken on the graph as it is before the first change, so
    chains (a->b, b->c) and swaps behave as simultaneous assignments.
    Returns the number of op inputs changed.
    """
    plan = {}
    for old_t, new_t, may_modify in moves:
        if old_t is new_t:
            continue
        for op in old_t.consumers():
            if not may_modify(op):
                continue
            for index, input_t in enumerate(op.inputs):
                if input_t is old_t:
                    plan.setdefault(op, {})[index] = new_t
    count = 0
    for op, updates in plan.items():
        for index, new_t in updates.items():
            op._update_input(index, new_t)  # pylint: disable=protected-access
            count += 1
    return count


def _reroute_ts(ts0, ts1, a2b, b2a, can_modify=None, cannot_modify=None):
    ts0 = util.make_list_of_t(ts0, allow_graph=False)
    ts1 = util.make_list_of_t(ts1, allow_graph=False)
    _check_ts_compatibility(ts0, ts1)
    if ts0 and ts1:
        util.get_unique_graph(ts0 + ts1)
    may_modify = _op_filter(can_modify, cannot_modify)
    moves = []
    for t0, t1 in zip(ts0, ts1):
        if a2b:
            moves.append((t1, t0, may_modify))
        if b2a:
            moves.append((t0, t1, may_modify))
    return _apply_moves(moves)


def swap_ts(ts0, ts1, can_modify=None, cannot_modify=None):
    """Swap the consumers of ``ts0[i]`` and ``ts1[i]`` for every i. Mutates the graph.

        before              after swap_ts([a], [b])
        a --> A             a --> B
        b --> B             b --> A

    Args:
      ts0, ts1: tensors (or lists) of equal length, compatible dtypes/shapes.
      can_modify: if given, only these ops may have their inputs changed.
      cannot_modify: ops whose inputs must stay as they are.
    Returns:
      The number of op inputs changed.
    Raises:
      TypeError: the arguments are not tensors / ops.
      ValueError: lengths, dtypes or shapes do not match, or mixed graphs.
    """
    return _reroute_ts(ts0, ts1, True, True, can_modify, cannot_modify)


def reroute_ts(ts0, ts1, can_modify=None, cannot_modify=None):
    """Make the consumers of ``ts1[i]`` consume ``ts0[i]`` instead. Mutates the graph.

        before              after reroute_ts([a], [b])
        a --> A             a --> A
                              \\-> B
        b --> B             b       (no consumer left)

    Same arguments, result and errors as ``swap_ts``.
    """
    return _reroute_ts(ts0, ts1, True, False, can_modify, cannot_modify)


def _retarget_view(view, mapping):
    """Rename the inputs (and passthrough outputs) of ``view`` in place."""
    passthroughs = set(view._passthrough_ts)  # pylint: disable=protected-access
    view._input_ts = [mapping.get(t, t) for t in view._input_ts]  # pylint: disable=protected-access
    view._output_ts = [mapping.get(t, t) if t in passthroughs else t  # pylint: disable=protected-access
                       for t in view._output_ts]  # pylint: disable=protected-access
    view._passthrough_ts = [mapping.get(t, t) for t in view._passthrough_ts]  # pylint: disable=protected-access


def _passthrough_consumers(view):
    return set(util.get_consuming_ops(view.passthroughs))


def _reroute_sgv_inputs(sgv0, sgv1, a2b, b2a):
    sgv0, sgv1 = subgraph.make_view(sgv0), subgraph.make_view(sgv1)
    util.check_graphs(sgv0, sgv1)
    inputs0, inputs1 = list(sgv0.inputs), list(sgv1.inputs)
    _check_ts_compatibility(inputs0, inputs1)
    inside0 = set(sgv0.ops) | _passthrough_consumers(sgv0)
    inside1 = set(sgv1.ops) | _passthrough_consumers(sgv1)
    moves = []
    for t0, t1 in zip(inputs0, inputs1):
        if a2b:
            moves.append((t1, t0, inside1.__contains__))
        if b2a:
            moves.append((t0, t1, inside0.__contains__))
    _apply_moves(moves)
    if a2b:
        _retarget_view(sgv1, dict(zip(inputs1, inputs0)))
    if b2a:
        _retarget_view(sgv0, dict(zip(inputs0, inputs1)))
    return sgv0, sgv1


def _reroute_sgv_outputs(sgv0, sgv1, a2b, b2a):
    sgv0, sgv1 = subgraph.make_view(sgv0), subgraph.make_view(sgv1)
    util.check_graphs(sgv0, sgv1)
    _reroute_ts(list(sgv0.outputs), list(sgv1.outputs), a2b, b2a,
                cannot_modify=list(sgv0.ops) + list(sgv1.ops))
    return sgv0, sgv1


def swap_inputs(sgv0, sgv1):
    """Swap the inputs of two subgraphs. Mutates the graph and both views.

        before                      after swap_inputs(A, B)
        x --> [A] -->               x --> [B] -->
        y --> [B] -->               y --> [A] -->

    Only ops of the views (and consumers of their passthroughs) change; the
    views are updated in place so that their ``inputs`` show the new tensors.

    Args:
      sgv0, sgv1: anything ``make_view`` accepts, with as many inputs each.
    Returns:
      ``(sgv0, sgv1)``, the updated views.
    Raises:
      ValueError: input counts, dtypes or shapes differ, or graphs differ.
    """
    return _reroute_sgv_inputs(sgv0, sgv1, True, True)


def reroute_inputs(sgv0, sgv1):
    """Make ``sgv1`` consume the inputs of ``sgv0``. Mutates the graph and ``sgv1``.

        before                      after reroute_inputs(A, B)
        x --> [A] -->               x --> [A] -->
        y --> [B] -->                 \\-> [B] -->
                                    y      (no longer consumed by B)

    Same arguments, result and errors as ``swap_inputs``.
    """
    return _reroute_sgv_inputs(sgv0, sgv1, True, False)


def swap_outputs(sgv0, sgv1):
    """Swap the consumers of the outputs of two subgraphs. Mutates the graph.

        before                      after swap_outputs(A, B)
        [A] --> C                   [A] --> D
        [B] --> D                   [B] --> C

    Consumers inside either view are left alone.

    Returns:
      ``(sgv0, sgv1)`` (views are unchanged: their outputs are the same tensors).
    Raises:
      ValueError: output counts, dtypes or shapes differ, or graphs differ.
    """
    return _reroute_sgv_outputs(sgv0, sgv1, True, True)


def reroute_outputs(sgv0, sgv1):
    """Make the consumers of ``sgv1``'s outputs consume ``sgv0``'s outputs. Mutates the graph.

        before                      after reroute_outputs(A, B)
        [A] --> C                   [A] --> C
                                        \\-> D
        [B] --> D                   [B]      (outputs no longer consumed)

    Same result and errors as ``swap_outputs``.
    """
    return _reroute_sgv_outputs(sgv0, sgv1, True, False)


def swap_ios(sgv0, sgv1):
    """Swap inputs and outputs: ``sgv0`` takes ``sgv1``'s place and vice versa.

        before                      after swap_ios(A, B)
        x --> [A] --> C             x --> [B] --> C
        y --> [B] --> D             y --> [A] --> D

    Mutates the graph and both views. Returns ``(sgv0, sgv1)``.
    """
    sgv0, sgv1 = _reroute_sgv_outputs(sgv0, sgv1, True, True)
    return _reroute_sgv_inputs(sgv0, sgv1, True, True)


def reroute_ios(sgv0, sgv1):
    """Plug ``sgv0`` in place of ``sgv1``: both its inputs and its output consumers.

        before                      after reroute_ios(A, B)
        x --> [A] --> C             x --> [A] --> C
                                      |       \\-> D
        y --> [B] --> D               \\-> [B]       (B's outputs unconsumed)
                                    y               (no longer read by B)

    Mutates the graph and ``sgv1``. Returns ``(sgv0, sgv1)``.
    """
    sgv0, sgv1 = _reroute_sgv_outputs(sgv0, sgv1, True, False)
    return _reroute_sgv_inputs(sgv0, sgv1, True, False)


def _check_op(op, what):
    if not isinstance(op, tf.Operation):
        raise TypeError("{} expects a tf.Operation, got {}".format(what, type(op).__name__))


def remove_control_inputs(op, cops):
    """Remove the control inputs ``cops`` from ``op``. Mutates the graph.

        before: c ..> op            after remove_control_inputs(op, c): op

    Raises:
      TypeError: ``op`` is not an op or ``cops`` not convertible to ops.
      ValueError: one of ``cops`` is not a control input of ``op``.
    """
    _check_op(op, "remove_control_inputs")
    cops = util.make_list_of_op(cops, allow_graph=False)
    current = list(op.control_inputs)
    for cop in cops:
        if cop not in current:
            raise ValueError("{} is not a control input of {}".format(cop.name, op.name))
    removed = set(cops)
    op._remove_all_control_inputs()  # pylint: disable=protected-access
    op._add_control_inputs([c for c in current if c not in removed])  # pylint: disable=protected-access


def add_control_inputs(op, cops):
    """Add ``cops`` as control inputs of ``op``. Mutates the graph.

        before: op                  after add_control_inputs(op, c): c ..> op

    Raises:
      TypeError: ``op`` is not an op or ``cops`` not convertible to ops.
      ValueError: one of ``cops`` already is a control input of ``op``, or
        lives in another graph.
    """
    _check_op(op, "add_control_inputs")
    cops = util.concatenate_unique([], util.make_list_of_op(cops, allow_graph=False))
    current = set(op.control_inputs)
    for cop in cops:
        if cop in current:
            raise ValueError("{} already is a control input of {}".format(cop.name, op.name))
        if cop.graph is not op.graph:
            raise ValueError("{} is not in the graph of {}".format(cop.name, op.name))
    if cops:
        op._add_control_inputs(cops)  # pylint: disable=protected-access
