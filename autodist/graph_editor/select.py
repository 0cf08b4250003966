"""Selecting ops and tensors: by filter, by regex, by name scope, by graph walks.

Nothing here modifies a graph. Walks return ops in a deterministic order: the
seeds first, then breadth-first in the order TensorFlow lists inputs/consumers.
"""
import re

import tensorflow as tf

from autodist.graph_editor import util

__all__ = [
    "can_be_regex",
    "make_regex",
    "filter_ts",
    "filter_ts_from_regex",
    "filter_ops",
    "filter_ops_from_regex",
    "get_name_scope_ops",
    "check_cios",
    "get_ops_ios",
    "compute_boundary_ts",
    "get_within_boundary_ops",
    "get_forward_walk_ops",
    "get_backward_walk_ops",
    "get_walks_intersection_ops",
    "get_walks_union_ops",
    "select_ops",
    "select_ts",
    "select_ops_and_ts",
]

_RE_TYPE = type(re.compile(""))
# A regex starting with one of these comments selects only ops / only tensors.
_OPS_COMMENT = "(?#ops)"
_TS_COMMENT = "(?#ts)"


def can_be_regex(obj):
    """True for a string or a compiled regular expression."""
    return isinstance(obj, (str, _RE_TYPE))


def make_regex(obj):
    """Compile ``obj`` unless it already is a compiled regex.

    Raises:
      TypeError: ``obj`` is neither a string nor a compiled regex.
    """
    if not can_be_regex(obj):
        raise TypeError("expected a string or a compiled regex, got {}".format(type(obj).__name__))
    return obj if isinstance(obj, _RE_TYPE) else re.compile(obj)


def _outputs_of(ops):
    return [t for op in ops for t in op.outputs]


def filter_ts(ops, positive_filter):
    """Output tensors of ``ops`` for which ``positive_filter(t)`` holds (``True``: all)."""
    ts = _outputs_of(util.make_list_of_op(ops))
    if positive_filter is not True:
        ts = [t for t in ts if positive_filter(t)]
    return ts


def filter_ts_from_regex(ops, regex):
    """Output tensors of ``ops`` whose name matches ``regex`` (``re.search``)."""
    regex_obj = make_regex(regex)
    return filter_ts(ops, lambda t: regex_obj.search(t.name) is not None)


def filter_ops(ops, positive_filter):
    """Ops of ``ops`` for which ``positive_filter(op)`` holds (``True``: all)."""
    ops = util.make_list_of_op(ops)
    if positive_filter is not True:
        ops = [op for op in ops if positive_filter(op)]
    return ops


def filter_ops_from_regex(ops, regex):
    """Ops of ``ops`` whose name matches ``regex`` (``re.search``)."""
    regex_obj = make_regex(regex)
    return filter_ops(ops, lambda op: regex_obj.search(op.name) is not None)


def get_name_scope_ops(ops, scope):
    """Ops of ``ops`` named ``scope`` or living under ``scope/``.

    The scope is matched literally (dots and brackets in it are not regex syntax).
    """
    scope = scope[:-1] if scope.endswith("/") else scope
    return filter_ops_from_regex(ops, "^{}(/.*)?$".format(re.escape(scope)))


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
    result = []
    for op in ops:
        util.concatenate_unique(result, [t.op for t in op.inputs])
        for t in op.outputs:
            util.concatenate_unique(result, t.consumers())
        if control_outputs is not None:
            util.concatenate_unique(result, control_outputs.get(op))
        if control_inputs:
            util.concatenate_unique(result, op.control_inputs)
    return result


def get_ops_ios(ops, control_inputs=False, control_outputs=None, control_ios=None):
    """Ops producing an input of ``ops`` or consuming one of their outputs.

    With control edges enabled (see ``check_cios``) control inputs / outputs
    count as well.
    """
    control_inputs, control_outputs = check_cios(control_inputs, control_outputs, control_ios)
    return _neighbours(util.make_list_of_op(ops), control_inputs, control_outputs)


def _boundary(ops):
    """Core of compute_boundary_ts, also returning the set of inside tensors."""
    ops_set = set(ops)
    inputs, outputs, inside = [], [], []
    seen_inputs, inside_set = set(), set()
    for op in ops:
        for t in op.inputs:
            if t in seen_inputs:
                continue
            seen_inputs.add(t)
            if t.op in ops_set:
                inside.append(t)
                inside_set.add(t)
            else:
                inputs.append(t)
    for op in ops:
        for t in op.outputs:
            if t not in inside_set:
                outputs.append(t)
            elif any(consumer not in ops_set for consumer in t.consumers()):
                outputs.append(t)
    return inputs, outputs, inside, inside_set


def compute_boundary_ts(ops):
    """Split the tensors around ``ops`` into ``(inputs, outputs, inside)``.

    * inputs: consumed by ``ops``, produced outside;
    * outputs: produced by ``ops`` and either consumed outside or not consumed
      at all (a tensor consumed both inside and outside is also inside);
    * inside: produced and consumed by ``ops``.

    Each list is ordered by op, then by input / output position.
    """
    inputs, outputs, inside, _ = _boundary(util.make_list_of_op(ops))
    return inputs, outputs, inside


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
    if not util.is_iterable(seed_ops):
        seed_ops = [seed_ops]
    seeds = []
    for item in seed_ops:
        if isinstance(item, tf.Tensor):
            util.concatenate_unique(seeds, tensor_fn(item))
        elif isinstance(item, tf.Operation):
            util.concatenate_unique(seeds, [item])
        else:
            raise TypeError("walk seeds must be tf.Operation or tf.Tensor, got {}".format(
                type(item).__name__))
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


def _parse_select_kwargs(kwargs, own_flag):
    graph, positive_filter, restrict = None, None, False
    for key, value in kwargs.items():
        if key == "graph":
            if value is not None and not isinstance(value, tf.Graph):
                raise TypeError("graph= must be a tf.Graph, got {}".format(type(value).__name__))
            graph = value
        elif key == "positive_filter":
            positive_filter = value
        elif key == own_flag:
            restrict = bool(value)
        elif key not in ("restrict_ops_regex", "restrict_ts_regex"):
            raise ValueError("unexpected keyword argument '{}'".format(key))
    return graph, positive_filter, restrict


def _select(args, kwargs, own_flag, own_comment, other_comment, from_regex, from_arg):
    graph, positive_filter, restrict = _parse_select_kwargs(kwargs, own_flag)
    selected, seen = [], set()
    for arg in args:
        if can_be_regex(arg):
            if graph is None:
                raise ValueError("selecting with the regex {!r} needs the graph= keyword".format(
                    getattr(arg, "pattern", arg)))
            regex = make_regex(arg)
            if regex.pattern.startswith(other_comment):
                continue
            if restrict and not regex.pattern.startswith(own_comment):
                continue
            candidates = from_regex(graph, regex)
        else:
            candidates = from_arg(arg)
        for item in candidates:
            if item not in seen and (positive_filter is None or positive_filter(item)):
                seen.add(item)
                selected.append(item)
    return selected


def _ops_of_arg(arg):
    if isinstance(arg, tf.Tensor):
        return []
    return util.make_list_of_op(arg, ignore_ts=True)


def _ts_of_arg(arg):
    if hasattr(arg, "ops") and hasattr(arg, "passthroughs"):  # a SubGraphView
        return list(arg.passthroughs)
    if isinstance(arg, tf.Operation):
        return []
    return util.make_list_of_t(arg, ignore_ops=True)


def select_ops(*args, **kwargs):
    """Ops selected by regexes, ops, lists of ops, graphs or views (tensors are ignored).

    Keyword args: ``graph`` (needed by regexes), ``positive_filter`` (keep an
    op only if it returns True), ``restrict_ops_regex`` (use only regexes
    starting with ``"(?#ops)"``). A regex starting with ``"(?#ts)"`` selects
    tensors and is ignored here.

    Raises:
      TypeError: an argument is not convertible, or ``graph`` is not a tf.Graph.
      ValueError: a regex is given without ``graph``, or an unknown keyword.
    """
    return _select(args, kwargs, "restrict_ops_regex", _OPS_COMMENT, _TS_COMMENT,
                   filter_ops_from_regex, _ops_of_arg)


def select_ts(*args, **kwargs):
    """Tensors selected by regexes, tensors or lists (ops are ignored).

    Keyword args as ``select_ops`` with ``restrict_ts_regex`` (use only regexes
    starting with ``"(?#ts)"``); regexes starting with ``"(?#ops)"`` are ignored.
    A SubGraphView argument contributes its passthrough tensors.
    """
    return _select(args, kwargs, "restrict_ts_regex", _TS_COMMENT, _OPS_COMMENT,
                   filter_ts_from_regex, _ts_of_arg)


def select_ops_and_ts(*args, **kwargs):
    """``(ops, ts)``: plain regexes select ops; regexes starting with ``"(?#ts)"`` tensors."""
    ops = select_ops(*args, restrict_ops_regex=False, **kwargs)
    ts = select_ts(*args, restrict_ts_regex=True, **kwargs)
    return ops, ts
