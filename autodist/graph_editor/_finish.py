"""Steps shared by both copy paths once the ops exist: links, collections, result view."""
import tensorflow as tf

from autodist.graph_editor import subgraph
from autodist.graph_editor import util


def collection_target(info, name, known):
    """Destination name of a collection: GraphKeys names (and non-strings) are kept."""
    if not isinstance(name, str) or name in known:
        return name
    return info.new_name(name)


def collection_targets(info):
    """``{collection: destination name}`` for the collections holding copied elements.

    Raises:
      ValueError: a renamed collection is not under the source scope.
    """
    known = util.get_predefined_collection_names()
    targets = {}
    for name, items in info.collections.items():
        for item in items:
            if isinstance(item, tf.Tensor):
                item = item.op
            if isinstance(item, tf.Operation) and item in info.ops:
                targets[name] = collection_target(info, name, known)
                break
    return targets


def assign_collections(info, targets):
    """What ``assign_renamed_collections_handler`` does, in one pass per collection.

    ``targets`` is ``collection_targets(info)``. Copies are appended in the
    order of the source collection. Mutates ``graph_``.
    """
    for name, target in targets.items():
        for item in info.collections[name]:
            if isinstance(item, tf.Operation):
                item_ = info.transformed_ops.get(item)
            elif isinstance(item, tf.Tensor) and item.op in info.ops:
                item_ = info.transformed_ts.get(item)
            else:
                continue
            if item_ is not None:
                info.graph_.add_to_collection(target, item_)


def link_original_ops(info, handler):
    """Copy ``_original_op`` links through ``handler``; unmapped links stay unset."""
    for op, op_ in info.transformed_ops.items():
        original = getattr(op, "_original_op", None)
        if original is not None:
            op_._original_op = handler(info, original)  # pylint: disable=protected-access


def result_view(info, sgv, inputs_, outputs_, passthroughs_):
    """The view of the copy, its inputs/outputs ordered like ``sgv``'s.

    ``outputs_`` None means the boundary of the copy is unknown (per-op
    copies may change the structure) and is computed from the graph.
    """
    if not sgv:
        return subgraph.SubGraphView()
    ops_ = [info.transformed_ops[op] for op in sgv.ops]
    if outputs_ is None:
        view_ = subgraph.SubGraphView(ops_, passthroughs_)
    else:
        inputs_ = util.concatenate_unique([], inputs_)
        known_inputs = set(inputs_)
        passthroughs_ = [t for t in util.concatenate_unique([], passthroughs_)
                         if t not in known_inputs]
        view_ = subgraph.SubGraphView._from_parts(  # pylint: disable=protected-access
            info.graph_, ops_, inputs_ + passthroughs_, outputs_ + passthroughs_, passthroughs_)
    input_set, output_set = set(view_.inputs), set(view_.outputs)
    mapped = info.transformed_ts
    new_inputs = util.concatenate_unique([], [
        mapped[t] for t in sgv.inputs if t in mapped and mapped[t] in input_set])
    new_outputs = [mapped[t] for t in sgv.outputs if t in mapped and mapped[t] in output_set]
    return view_.remap(new_inputs, new_outputs)
