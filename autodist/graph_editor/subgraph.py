"""SubGraphView: a lightweight, value-like view on part of a tf.Graph.

A view is a function ``F(inputs) -> outputs`` computed by ``ops``:

        inputs          ops            outputs
      a:0 ---->  [ add ] -> [ mul ] ---> mul:0
      b:0 ---->     \\_______________---> add:0   (also consumed outside)
      p:0 ----------------------------> p:0      (passthrough: no op in between)

Views never change the graph. ``remap*`` methods return new views; the
private ``_remap*`` twins do the same work in place and are used by the
editing functions that are documented to update the views they are given.
"""
import tensorflow as tf

from autodist.graph_editor import select
from autodist.graph_editor import util

__all__ = ["SubGraphView", "make_view", "make_view_from_scope"]


def _finalize_indices(items, ts, what):
    """Turn a mix of indices and tensors of ``ts`` into indices."""
    positions = {t: i for i, t in reversed(list(enumerate(ts)))}
    indices = []
    for item in items:
        if isinstance(item, tf.Tensor):
            if item not in positions:
                raise ValueError("{} is not one of the {} of the view".format(item.name, what))
            indices.append(positions[item])
        elif isinstance(item, int) and not isinstance(item, bool):
            indices.append(item)
        else:
            raise TypeError("remap expects integers or tf.Tensor, got {}".format(
                type(item).__name__))
    return indices


def _check_indices(indices, size, what, repetition):
    for index in indices:
        if not 0 <= index < size:
            raise ValueError("index {} is out of range for the {} {} of the view".format(
                index, size, what))
    if not repetition and len(set(indices)) != len(indices):
        raise ValueError("the new {} mapping {} repeats an index".format(what, list(indices)))


class SubGraphView:
    """A subgraph view: ops, input tensors, output tensors and passthroughs.

    Args:
      inside_ops: anything convertible to a list of ops: the ops of the view.
      passthrough_ts: anything convertible to a list of tensors; those not
        connected to ``inside_ops`` become passthroughs (both input and
        output), the others are silently ignored.

    Raises:
      TypeError: the arguments are not convertible to ops / tensors.
      ValueError: they belong to several graphs.
    """

    def __init__(self, inside_ops=(), passthrough_ts=()):
        inside_ops = util.make_list_of_op(inside_ops)
        passthrough_ts = util.make_list_of_t(passthrough_ts)
        if not inside_ops and not passthrough_ts:
            self._graph = None
            self._ops, self._passthrough_ts, self._input_ts, self._output_ts = [], [], [], []
            return
        self._graph = util.get_unique_graph(inside_ops + passthrough_ts)
        self._ops = inside_ops
        inputs, outputs, _, inside = select._boundary(inside_ops)  # pylint: disable=protected-access
        connected = inside.union(inputs, outputs)
        self._passthrough_ts = util.concatenate_unique(
            [], [t for t in passthrough_ts if t not in connected])
        self._input_ts = inputs + self._passthrough_ts
        self._output_ts = outputs + self._passthrough_ts

    @classmethod
    def _from_parts(cls, graph, ops, inputs, outputs, passthroughs=()):
        """A view whose boundary the caller already knows (no graph traversal)."""
        view = cls.__new__(cls)
        view._graph = graph
        view._ops = list(ops)
        view._passthrough_ts = list(passthroughs)
        view._input_ts = list(inputs)
        view._output_ts = list(outputs)
        return view

    # ---- value semantics ------------------------------------------------
    def _assign_from(self, other):
        """Make self identical to ``other`` (in place)."""
        if not isinstance(other, SubGraphView):
            raise TypeError("expected a SubGraphView, got {}".format(type(other).__name__))
        self._graph = other._graph
        self._ops = list(other._ops)
        self._passthrough_ts = list(other._passthrough_ts)
        self._input_ts = list(other._input_ts)
        self._output_ts = list(other._output_ts)

    def copy(self):
        """A new, identical view (the graph itself is not copied)."""
        return SubGraphView._from_parts(self._graph, self._ops, self._input_ts,
                                        self._output_ts, self._passthrough_ts)

    __copy__ = copy

    # ---- in-place remapping (private twins) -----------------------------
    def _remap_default(self, remove_input_map=True, remove_output_map=True):
        if not remove_input_map and not remove_output_map:
            return
        inputs, outputs, _ = select.compute_boundary_ts(self._ops)
        if remove_input_map:
            self._input_ts = list(inputs) + self._passthrough_ts
        if remove_output_map:
            self._output_ts = list(outputs) + self._passthrough_ts

    def _remap_inputs(self, new_input_indices):
        indices = _finalize_indices(new_input_indices, self._input_ts, "inputs")
        _check_indices(indices, len(self._input_ts), "inputs", repetition=False)
        self._input_ts = [self._input_ts[i] for i in indices]

    def _remap_outputs(self, new_output_indices):
        indices = _finalize_indices(new_output_indices, self._output_ts, "outputs")
        _check_indices(indices, len(self._output_ts), "outputs", repetition=True)
        self._output_ts = [self._output_ts[i] for i in indices]

    def _remap_outputs_make_unique(self):
        self._output_ts = util.concatenate_unique([], self._output_ts)

    def _remap_outputs_to_consumers(self):
        self._remap_outputs_make_unique()
        self._output_ts = [t for t in self._output_ts for _ in t.consumers()]

    # ---- remapping (new views) ------------------------------------------
    def remap_default(self, remove_input_map=True, remove_output_map=True):
        """New view whose inputs and/or outputs are reset to the default mapping."""
        view = self.copy()
        view._remap_default(remove_input_map, remove_output_map)
        return view

    def remap_inputs(self, new_input_indices):
        """New view with inputs ``[inputs[i] for i in new_input_indices]``.

        Items are indices or input tensors; the mapping may drop inputs but not
        repeat one. Raises ValueError / TypeError on a bad mapping.
        """
        view = self.copy()
        view._remap_inputs(new_input_indices)
        return view

    def remap_outputs(self, new_output_indices):
        """New view with outputs ``[outputs[i] for i in new_output_indices]`` (repeats allowed)."""
        view = self.copy()
        view._remap_outputs(new_output_indices)
        return view

    def remap(self, new_input_indices=None, new_output_indices=None):
        """New view with remapped inputs and/or outputs (None: unchanged)."""
        view = self.copy()
        if new_input_indices is not None:
            view._remap_inputs(new_input_indices)
        if new_output_indices is not None:
            view._remap_outputs(new_output_indices)
        return view

    def remap_outputs_make_unique(self):
        """New view whose outputs appear once each (first occurrence kept)."""
        view = self.copy()
        view._remap_outputs_make_unique()
        return view

    def remap_outputs_to_consumers(self):
        """New view where each output is repeated once per consumer (unconsumed ones drop)."""
        view = self.copy()
        view._remap_outputs_to_consumers()
        return view

    def remove_unused_ops(self, control_inputs=True):
        """New view keeping only ops on a path from a connected input or to a connected output.

        With ``control_inputs``, ops reaching an output only through control
        edges are kept too.
        """
        used = set(select.get_walks_union_ops(self.connected_inputs, self.connected_outputs,
                                              within_ops=self._ops,
                                              control_inputs=control_inputs))
        view = self.copy()
        view._ops = [op for op in self._ops if op in used]
        return view

    # ---- queries --------------------------------------------------------
    @property
    def graph(self):
        return self._graph

    @property
    def ops(self):
        return util.ListView(self._ops)

    @property
    def inputs(self):
        return util.ListView(self._input_ts)

    @property
    def outputs(self):
        return util.ListView(self._output_ts)

    @property
    def passthroughs(self):
        return util.ListView(self._passthrough_ts)

    @property
    def connected_inputs(self):
        passthroughs = set(self._passthrough_ts)
        return [t for t in self._input_ts if t not in passthroughs]

    @property
    def connected_outputs(self):
        passthroughs = set(self._passthrough_ts)
        return [t for t in self._output_ts if t not in passthroughs]

    def is_passthrough(self, t):
        """True if ``t`` is a passthrough tensor of this view."""
        return t in set(self._passthrough_ts)

    def op(self, op_id):
        """The op at position ``op_id`` of ``ops``."""
        return self._ops[op_id]

    def find_op_by_name(self, op_name):
        """The op of the view named ``op_name``; ValueError if there is none."""
        for op in self._ops:
            if op.name == op_name:
                return op
        raise ValueError("the view has no op named '{}'".format(op_name))

    def input_index(self, t):
        """Position of ``t`` in ``inputs``; ValueError if it is not an input."""
        for index, input_t in enumerate(self._input_ts):
            if input_t is t:
                return index
        raise ValueError("{} is not an input of the view".format(getattr(t, "name", t)))

    def output_index(self, t):
        """First position of ``t`` in ``outputs``; ValueError if it is not an output."""
        for index, output_t in enumerate(self._output_ts):
            if output_t is t:
                return index
        raise ValueError("{} is not an output of the view".format(getattr(t, "name", t)))

    def consumers(self):
        """Ops outside the view consuming one of its outputs (no duplicates)."""
        ops = set(self._ops)
        return util.concatenate_unique(
            [], (op for t in self._output_ts for op in t.consumers() if op not in ops))

    # ---- python protocol ------------------------------------------------
    def __bool__(self):
        """False for the empty view (no ops, no passthroughs)."""
        return self._graph is not None

    __nonzero__ = __bool__

    def __enter__(self):
        """``with make_view(...) as view:`` keeps a view's life short."""
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        return False

    def __str__(self):
        if self._graph is None:
            return "SubGraphView: empty"

        def block(title, items):
            lines = ["** {}[{}]:".format(title, len(items))]
            lines += ["  {}".format(item.name) for item in items]
            return lines

        lines = ["SubGraphView (graph id {}):".format(id(self._graph))]
        lines += block("ops", self._ops)
        lines += block("inputs", self._input_ts)
        lines += block("outputs", self._output_ts)
        lines += block("passthroughs", self._passthrough_ts)
        return "\n".join(lines)

    def __repr__(self):
        return "<SubGraphView: {} ops, {} inputs, {} outputs>".format(
            len(self._ops), len(self._input_ts), len(self._output_ts))


def _check_graph(view, graph):
    if graph is not None and view.graph is not None and view.graph is not graph:
        raise ValueError("the view belongs to another graph than graph=")
    return view


def make_view(*args, **kwargs):
    """Build a SubGraphView from ops, tensors, regexes, lists or views.

    Ops (and regexes, matched against op names) give the view's ops; tensors
    (and regexes starting with ``"(?#ts)"``) are candidate passthroughs. A
    single SubGraphView argument is returned as is. Keyword ``graph`` is
    needed for regexes and checks the graph of the result.

    Raises:
      TypeError: an argument cannot be converted, or ``graph`` is no tf.Graph.
      ValueError: unknown keyword, regex without ``graph``, or mixed graphs.
    """
    graph = kwargs.get("graph")
    if len(args) == 1 and isinstance(args[0], SubGraphView):
        if graph is not None and not isinstance(graph, tf.Graph):
            raise TypeError("graph= must be a tf.Graph, got {}".format(type(graph).__name__))
        return _check_graph(args[0], graph)
    ops, ts = select.select_ops_and_ts(*args, **kwargs)
    return _check_graph(SubGraphView(ops, ts), graph)


def make_view_from_scope(scope, graph):
    """View of the ops of ``graph`` named ``scope`` or living under ``scope/``."""
    return SubGraphView(select.get_name_scope_ops(graph, scope))
