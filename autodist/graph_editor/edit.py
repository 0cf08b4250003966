"""Editing subgraphs in place: detach, connect, bypass.

Every function here MUTATES the graph: it may add placeholders and rewires
existing ops (through ``reroute``). Open a new ``tf.compat.v1.Session`` after
an edit; sessions that already ran the graph do not see it.
"""
from autodist.graph_editor import reroute
from autodist.graph_editor import select
from autodist.graph_editor import subgraph
from autodist.graph_editor import util

__all__ = [
    "detach_control_inputs",
    "detach_control_outputs",
    "detach_inputs",
    "detach_outputs",
    "detach",
    "connect",
    "bypass",
]


def detach_control_inputs(sgv):
    """Remove the control inputs coming from outside ``sgv``. Mutates the graph.

        before: c ..> [sgv]         after: c   [sgv]

    Control edges between ops of the view are kept.
    """
    sgv = subgraph.make_view(sgv)
    inside = set(sgv.ops)
    for op in sgv.ops:
        outside = [cop for cop in op.control_inputs if cop not in inside]
        if outside:
            reroute.remove_control_inputs(op, outside)


def detach_control_outputs(sgv, control_outputs):
    """Remove the control edges from ``sgv`` to ops outside it. Mutates the graph.

        before: [sgv] ..> d         after: [sgv]   d

    Args:
      sgv: anything ``make_view`` accepts.
      control_outputs: a util.ControlOutputs of the graph; it is refreshed
        after the edit.
    Raises:
      TypeError: ``control_outputs`` is not a util.ControlOutputs.
    """
    if not isinstance(control_outputs, util.ControlOutputs):
        raise TypeError("control_outputs must be a util.ControlOutputs, got {}".format(
            type(control_outputs).__name__))
    sgv = subgraph.make_view(sgv)
    control_outputs.update()
    inside = set(sgv.ops)
    removals = {}  # consumer -> its control inputs from the view (one rewrite per consumer)
    for op in sgv.ops:
        for consumer in control_outputs.get(op):
            if consumer not in inside and op in consumer.control_inputs:
                removals.setdefault(consumer, []).append(op)
    for consumer, ops in removals.items():
        reroute.remove_control_inputs(consumer, ops)
    control_outputs.update(force=True)


def detach_inputs(sgv, control_inputs=False):
    """Cut ``sgv`` from its inputs: each input is replaced by a new placeholder.

        before: x --> [sgv]         after: x    geph__x_0 --> [sgv]

    Mutates the graph (adds one placeholder per input, named with
    ``util.placeholder_name``) and the view if one is given.

    Args:
      sgv: anything ``make_view`` accepts.
      control_inputs: also remove control inputs coming from outside.
    Returns:
      ``(sgv, input_placeholders)``: the detached view, the new placeholders
      (one per ``sgv.inputs``, same order).
    """
    sgv = subgraph.make_view(sgv)
    with util.clean_graph_context(sgv.graph):
        placeholders = [util.make_placeholder_from_tensor(t) for t in sgv.inputs]
    reroute.swap_inputs(sgv, placeholders)
    if control_inputs:
        detach_control_inputs(sgv)
    return sgv, placeholders


def detach_outputs(sgv, control_outputs=None):
    """Cut ``sgv``'s outputs from their consumers outside the view.

        before: [sgv] --> y --> C   after: [sgv] --> y    geph__y_0 --> C

    Each output consumed outside gets a placeholder that its outside
    consumers read instead. Mutates the graph.

    Args:
      sgv: anything ``make_view`` accepts.
      control_outputs: a util.ControlOutputs to also remove control edges to
        ops outside the view (None: keep them).
    Returns:
      ``(sgv_, output_placeholders)``: ``sgv`` remapped to the detached
      outputs, and one placeholder per such output (same order).
    """
    sgv = subgraph.make_view(sgv)
    inside = set(sgv.ops)
    kept = [index for index, t in enumerate(sgv.outputs)
            if any(op not in inside for op in t.consumers())]
    sgv_ = sgv.remap_outputs(kept).remap_outputs_make_unique()
    with util.clean_graph_context(sgv_.graph):
        placeholders = [util.make_placeholder_from_tensor(t) for t in sgv_.outputs]
    if placeholders:
        reroute.reroute_ts(placeholders, list(sgv_.outputs), cannot_modify=sgv_.ops)
    if control_outputs is not None:
        detach_control_outputs(sgv_, control_outputs)
    return sgv_, placeholders


def detach(sgv, control_inputs=False, control_outputs=None, control_ios=None):
    """Detach both inputs and outputs of ``sgv`` (see ``detach_inputs`` / ``detach_outputs``).

        before: x --> [sgv] --> C   after: x   ph_in --> [sgv]   ph_out --> C

    Mutates the graph. Control edges are detached as ``select.check_cios``
    describes (``control_ios`` = both directions).

    Returns:
      ``(sgv, detached_inputs, detached_outputs)``.
    """
    control_inputs, control_outputs = select.check_cios(control_inputs, control_outputs,
                                                        control_ios)
    sgv, detached_inputs = detach_inputs(sgv, control_inputs)
    _, detached_outputs = detach_outputs(sgv, control_outputs)
    return sgv, detached_inputs, detached_outputs


def connect(sgv0, sgv1, disconnect_first=False):
    """Feed the outputs of ``sgv0`` to the inputs of ``sgv1``. Mutates the graph.

        before: [sgv0] --> y        after: [sgv0] --> y --> [sgv1]
                x --> [sgv1]               x

    Args:
      sgv0, sgv1: anything ``make_view`` accepts; ``sgv0`` must have as many
        outputs as ``sgv1`` has inputs.
      disconnect_first: first detach ``sgv0``'s outputs from their current
        outside consumers.
    Returns:
      ``(sgv0, sgv1)``, ``sgv1`` updated to its new inputs.
    Raises:
      ValueError: counts, dtypes or shapes differ, or the graphs differ.
    """
    sgv0, sgv1 = subgraph.make_view(sgv0), subgraph.make_view(sgv1)
    util.check_graphs(sgv0, sgv1)
    if disconnect_first:
        detach_outputs(sgv0)
    outputs_view = subgraph.SubGraphView(passthrough_ts=list(sgv0.outputs))
    reroute.reroute_inputs(outputs_view, sgv1)
    return sgv0, sgv1


def bypass(sgv):
    """Short-circuit ``sgv``: its outside consumers read its inputs directly.

        before: x --> [sgv] --> y --> C     after: x --> C
                                                   geph__x_0 --> [sgv] --> y

    ``sgv`` must have as many inputs as outputs (paired by position, with
    compatible dtypes/shapes). Mutates the graph.

    Returns:
      ``(sgv, detached_inputs)``: the detached view and its new input placeholders.
    Raises:
      ValueError: input and output counts, dtypes or shapes differ.
    """
    sgv = subgraph.make_view(sgv)
    original_inputs = list(sgv.inputs)
    outputs = list(sgv.outputs)
    reroute._check_ts_compatibility(original_inputs, outputs)  # pylint: disable=protected-access
    sgv, detached_inputs = detach_inputs(sgv)
    reroute.reroute_ts(original_inputs, outputs, cannot_modify=sgv.ops)
    return sgv, detached_inputs
