"""Graph walks and neighbourhoods (re-exported by ``select``).

Nothing here modifies a graph. Walks return ops in a deterministic order: the
seeds first, then breadth-first in the order TensorFlow lists inputs/consumers.
"""
import tensorflow as tf

from autodist.graph_editor import util


def check_cios(control_inputs=False, control_outputs=None, control_ios=None):
    """Normalise the control-edge options shared by the walk functions.

    Returns ``(control_inputs, control_outputs)``: whether to follow control
    inputs, and the ControlOutputs to follow control outputs with (or None).
    ``control_ios`` is a shortcut for both.

    Raises:
      TypeError: ``control_outputs`` / ``control_ios`` is not a util.ControlOutputs.
      ValueError: both ``control_outputs`` and ``control_ios`` are given.
    """
    if control_ios is not None:
        if not isinstance(control_ios, util.ControlOutputs):
            raise TypeError("control_ios must be a util.ControlOutputs, got {}".format(
                type(control_ios).__name__))
        if control_outputs is not None:
            raise ValueError("give control_outputs or control_ios, not both")
        control_inputs, control_outputs = True, control_ios
    elif control_outputs is not None and not isinstance(control_outputs, util.ControlOutputs):
        raise TypeError("control_outputs must be a util.ControlOutputs, got {}".format(
            type(control_outputs).__name__))
    if control_outputs is not None:
        control_outputs.update()
    return control_inputs, control_outputs


def _neighbours(ops, control_inputs, control_outputs):
    result, seen = [], set()

    def add(items):
        for item in items:
            if item not in seen:
                seen.add(item)
                result.append(item)

    for op in ops:
        add(t.op for t in op.inputs)
        for t in op.outputs:
            add(t.consumers())
        if control_outputs is not None:
            add(control_outputs.get(op))
        if control_inputs:
            add(op.control_inputs)
    return result


def get_ops_ios(ops, control_inputs=False, control_outputs=None, control_ios=None):
    """Ops producing an input of ``ops`` or consuming one of their outputs.

    With control edges enabled (see ``check_cios``) control inputs / outputs
    count as well.
    """
    control_inputs, control_outputs = check_cios(control_inputs, control_outputs, control_ios)
    return _neighbours(util.make_list_of_op(ops), control_inputs, control_outputs)


def get_within_boundary_ops(ops, seed_ops, boundary_ops=(), inclusive=True,
                            control_inputs=False, control_outputs=None, control_ios=None):
    """Flood-fill from ``seed_ops`` through ``ops``, stopping at ``boundary_ops``.

    The fill moves along data edges in both directions (and control edges when
    enabled) and never leaves ``ops``. Boundary ops reached are part of the
    result only if ``inclusive``.

    Raises:
      ValueError: ``boundary_ops`` and ``seed_ops`` intersect.
    """
    control_inputs, control_outputs = check_cios(control_inputs, control_outputs, control_ios)
    ops = util.make_list_of_op(ops)
    within = set(ops)
    seeds = util.make_list_of_op(seed_ops)
    boundary = set(util.make_list_of_op(boundary_ops))
    overlap = boundary.intersection(seeds)
    if overlap:
        raise ValueError("boundary ops are also seeds: {}".format(
            sorted(op.name for op in overlap)))
    reached = set(seeds)
    wave = seeds
    while wave:
        new_wave = []
        for op in _neighbours(wave, control_inputs, control_outputs):
            if op in reached or op not in within:
                continue
            reached.add(op)
            if op not in boundary:
                new_wave.append(op)
        wave = new_wave
    if not inclusive:
        reached -= boundary
    return [op for op in ops if op in reached]


def _seeds(seed_ops, tensor_fn):
    if hasattr(seed_ops, "ops") and hasattr(seed_ops, "passthroughs"):  # a SubGraphView
        seed_ops = list(seed_ops.ops)
    if not util.is_iterable(seed_ops):
        seed_ops = [seed_ops]
    seeds, seen = [], set()
    for item in seed_ops:
        if isinstance(item, tf.Tensor):
            candidates = tensor_fn(item)
        elif isinstance(item, tf.Operation):
            candidates = [item]
        else:
            raise TypeError("walk seeds must be tf.Operation or tf.Tensor, got {}".format(
                type(item).__name__))
        for op in candidates:
            if op not in seen:
                seen.add(op)
                seeds.append(op)
    if seeds:
        util.get_unique_graph(seeds)
    return seeds


def _walk(seeds, step, inclusive, within_ops, within_ops_fn):
    within = None if within_ops is None else set(util.make_list_of_op(within_ops, allow_graph=False))
    if within is not None:
        seeds = [op for op in seeds if op in within]

    def accept(op):
        return (within is None or op in within) and (within_ops_fn is None or within_ops_fn(op))

    result = list(seeds)
    reached = set(seeds)
    wave = seeds
    while wave:
        new_wave = []
        for op in wave:
            for new_op in step(op):
                if new_op not in reached and accept(new_op):
                    reached.add(new_op)
                    new_wave.append(new_op)
        result.extend(new_wave)
        wave = new_wave
    if not inclusive:
        seed_set = set(seeds)
        result = [op for op in result if op not in seed_set]
    return result


def get_forward_walk_ops(seed_ops, inclusive=True, within_ops=None, within_ops_fn=None,
                         stop_at_ts=(), control_outputs=None):
    """Ops reachable downstream of ``seed_ops`` (ops, or tensors: their consumers).

    Args:
      seed_ops: ops or tensors to start from.
      inclusive: keep the seeds in the result.
      within_ops: if given, the walk never leaves these ops.
      within_ops_fn: if given, an op is entered only if ``within_ops_fn(op)``.
      stop_at_ts: tensors the walk does not cross.
      control_outputs: a util.ControlOutputs to also follow control edges.
    """
    _, control_outputs = check_cios(False, control_outputs)
    seeds = _seeds(seed_ops, lambda t: t.consumers())
    stop = set(util.make_list_of_t(stop_at_ts, allow_graph=False))

    def step(op):
        nexts = [consumer for t in op.outputs if t not in stop for consumer in t.consumers()]
        if control_outputs is not None:
            nexts.extend(control_outputs.get(op))
        return nexts

    return _walk(seeds, step, inclusive, within_ops, within_ops_fn)


def get_backward_walk_ops(seed_ops, inclusive=True, within_ops=None, within_ops_fn=None,
                          stop_at_ts=(), control_inputs=False):
    """Ops reachable upstream of ``seed_ops`` (ops, or tensors: their producers).

    Arguments as in ``get_forward_walk_ops``; ``control_inputs`` makes the walk
    follow control inputs too.
    """
    seeds = _seeds(seed_ops, lambda t: [t.op])
    stop = set(util.make_list_of_t(stop_at_ts, allow_graph=False))

    def step(op):
        nexts = [t.op for t in op.inputs if t not in stop]
        if control_inputs:
            nexts.extend(op.control_inputs)
        return nexts

    return _walk(seeds, step, inclusive, within_ops, within_ops_fn)


def _both_walks(forward_seed_ops, backward_seed_ops, forward_inclusive, backward_inclusive,
                within_ops, within_ops_fn, control_inputs, control_outputs, control_ios):
    control_inputs, control_outputs = check_cios(control_inputs, control_outputs, control_ios)
    forward = get_forward_walk_ops(forward_seed_ops, inclusive=forward_inclusive,
                                   within_ops=within_ops, within_ops_fn=within_ops_fn,
                                   control_outputs=control_outputs)
    backward = get_backward_walk_ops(backward_seed_ops, inclusive=backward_inclusive,
                                     within_ops=within_ops, within_ops_fn=within_ops_fn,
                                     control_inputs=control_inputs)
    return forward, backward


def get_walks_intersection_ops(forward_seed_ops, backward_seed_ops, forward_inclusive=True,
                               backward_inclusive=True, within_ops=None, within_ops_fn=None,
                               control_inputs=False, control_outputs=None, control_ios=None):
    """Ops both downstream of the forward seeds and upstream of the backward seeds.

    Typical use: the ops between some inputs and some outputs. The result
    follows the forward walk's order.
    """
    forward, backward = _both_walks(forward_seed_ops, backward_seed_ops, forward_inclusive,
                                    backward_inclusive, within_ops, within_ops_fn,
                                    control_inputs, control_outputs, control_ios)
    backward = set(backward)
    return [op for op in forward if op in backward]


def get_walks_union_ops(forward_seed_ops, backward_seed_ops, forward_inclusive=True,
                        backward_inclusive=True, within_ops=None, within_ops_fn=None,
                        control_inputs=False, control_outputs=None, control_ios=None):
    """Ops downstream of the forward seeds or upstream of the backward seeds."""
    forward, backward = _both_walks(forward_seed_ops, backward_seed_ops, forward_inclusive,
                                    backward_inclusive, within_ops, within_ops_fn,
                                    control_inputs, control_outputs, control_ios)
    return util.concatenate_unique(forward, backward)
