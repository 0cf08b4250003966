"""Per-op copies, for transformers whose ``transform_op_handler`` is custom.

Ops are handed to the handler producers-first. Data cycles (TF1 ``while``
loops: NextIteration -> Merge) cannot be ordered; a consumer met before its
producer reads a temporary placeholder (prefix ``geph_tmp``) that
``finalize_cycles`` replaces by the real tensor once it exists.
"""
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from autodist.graph_editor import util

_LOC = b"loc:@"


def producers_first(ops):
    """``ops`` ordered so producers come before consumers (creation order otherwise).

    A depth-first post-order over data edges inside ``ops``; an edge closing a
    cycle is ignored, so every op appears exactly once.
    """
    inside = set(ops)
    ordered, done, active = [], set(), set()
    for root in sorted(ops, key=lambda op: op._id):  # pylint: disable=protected-access
        if root in done:
            continue
        stack = [(root, iter([t.op for t in root.inputs]))]
        active.add(root)
        while stack:
            op, producers = stack[-1]
            for producer in producers:
                if producer in inside and producer not in done and producer not in active:
                    active.add(producer)
                    stack.append((producer, iter([t.op for t in producer.inputs])))
                    break
            else:
                stack.pop()
                active.discard(op)
                done.add(op)
                ordered.append(op)
    return ordered


def temporary_input(info, t, consumer):
    """Stand-in for ``t`` (inside the view, not copied yet) read by ``consumer``."""
    with util.clean_graph_context(info.graph_):
        tmp = util.make_placeholder_from_tensor(t, scope=info.scope_, prefix="geph_tmp")
    info.tmp_cyclic_ts.append((t, tmp, consumer))
    return tmp


def finalize_cycles(info):
    """Replace the temporary placeholders by the copied tensors. Mutates ``graph_``."""
    for t, tmp, consumer in info.tmp_cyclic_ts:
        if t not in info.transformed_ts or consumer not in info.transformed_ops:
            raise ValueError("cycle through {} could not be closed: {} was not copied".format(
                t.name, t.op.name if t not in info.transformed_ts else consumer.name))
        t_ = info.transformed_ts[t]
        consumer_ = info.transformed_ops[consumer]
        for index, input_t in enumerate(consumer_.inputs):
            if input_t is tmp:
                consumer_._update_input(index, t_)  # pylint: disable=protected-access


def connect_control_inputs(info, handler, ops_and_names=None):
    """Give each copied op the handler's image of its source control inputs.

    Mutates ``graph_``. ``ops_and_names`` restricts the work to
    ``{op_: [source op names]}``; by default every copied op is handled.
    """
    if ops_and_names is None:
        pairs = [(info.transformed_ops[op], op.control_inputs) for op in info.sgv.ops]
    else:
        pairs = [(op_, [info.graph.get_operation_by_name(name) for name in names])
                 for op_, names in ops_and_names.items()]
    for op_, control_inputs in pairs:
        existing = set(op_.control_inputs)
        new = []
        for control_input in control_inputs:
            control_input_ = handler(info, control_input)
            if control_input_ is None or control_input_ in existing:
                continue
            if not isinstance(control_input_, tf.Operation):
                raise TypeError("the control input handler returned {!r} for {}, not a "
                                "tf.Operation".format(control_input_, control_input.name))
            if control_input_.graph is not info.graph_:
                raise ValueError("the control input handler returned {} for {}, which is not "
                                 "in the destination graph".format(control_input_.name,
                                                                   control_input.name))
            existing.add(control_input_)
            new.append(control_input_)
        if new:
            op_._add_control_inputs(new)  # pylint: disable=protected-access


def _class_values(op):
    try:
        return list(op.get_attr("_class"))
    except ValueError:
        return None


def remap_colocation(info):
    """Point the ``_class`` attrs of the copies at the copied ops. Mutates ``graph_``.

    An entry naming an op of the view is renamed to its copy; one naming an op
    outside is kept if the destination graph has an op of that name (always
    true within one graph) and dropped otherwise.
    """
    renamed = {op.name: op_.name for op, op_ in info.transformed_ops.items()}
    dst_names = []  # filled on first use: names of the destination graph's ops
    for op_ in info.transformed_ops.values():
        values = _class_values(op_)
        if not values:
            continue
        final = []
        for value in values:
            name = value[len(_LOC):].decode() if value.startswith(_LOC) else None
            if name is None:
                final.append(value)
            elif name in renamed:
                final.append(_LOC + renamed[name].encode())
            elif info.graph is info.graph_ or name in _op_names(info, dst_names):
                final.append(value)
        if final == values:
            continue
        if final:
            op_._set_attr("_class", attr_value_pb2.AttrValue(  # pylint: disable=protected-access
                list=attr_value_pb2.AttrValue.ListValue(s=final)))
        else:
            op_._clear_attr("_class")  # pylint: disable=protected-access


def _op_names(info, cache):
    if not cache:
        cache.append({op.name for op in info.graph_.get_operations()})
    return cache[0]
