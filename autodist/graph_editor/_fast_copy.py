"""Copy a subgraph with one ``import_graph_def`` instead of one Python call per op.

The selected ops' NodeDefs are rewritten, then imported in C++ at once:

    source NodeDef                      rewritten NodeDef           input_map
    name: "m/add"                       name: "rep0/m/add"
    input: "m/mul"        (inside)  ->  input: "rep0/m/mul"
    input: "x:0"          (outside) ->  input: "x:0"          "x:0" -> handler(x:0)
    input: "^init"        (outside) ->  (dropped, re-added after import if kept)
    _class: "loc:@m/var"  (inside)  ->  _class: "loc:@rep0/m/var"

Names are made unique with ``dst_graph.unique_name`` beforehand, so the import
never renames anything. What the importer cannot express is fixed afterwards
with op-level edits: control inputs and ``_class`` entries pointing outside
the copy (the importer rejects both), and the devices of colocated ops (the
importer overwrites them with the device of the op they are colocated with).
"""
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import graph_pb2

from autodist.graph_editor import _library

_LOC = b"loc:@"
ENTER_OPS = ("Enter", "RefEnter")


def _source_graph_def(graph, ops, src_names, with_library):
    """A GraphDef holding the NodeDefs of ``ops``, in the order of ``ops``.

    Copying a whole graph (the common case of replication) reuses
    ``as_graph_def()`` as is, library included; a part of a graph is gathered
    op by op, with only the functions its nodes need.
    """
    whole = None
    if len(ops) == len(graph.get_operations()):
        whole = graph.as_graph_def()
        if all(node.name == name for node, name in zip(whole.node, src_names)):
            if not with_library:
                whole.ClearField("library")
            return whole
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.CopyFrom(graph.graph_def_versions)
    graph_def.node.extend(op.node_def for op in ops)
    if with_library and _library.graph_may_have_functions(graph):
        library = (whole if whole is not None else graph.as_graph_def()).library
        graph_def.library.CopyFrom(_library.library_closure(graph_def.node, library))
    return graph_def


class _Rewriter:
    """Rewrites the NodeDefs of one copy and records what to fix after import."""

    def __init__(self, external_tensor_fn, info, renamed, inline_controls):
        self.external_tensor_fn = external_tensor_fn
        self.info = info
        self.renamed = renamed
        self.new_names = set(renamed.values())
        self.inline_controls = inline_controls
        self.input_map = {}
        self.inputs_ = []            # boundary inputs of the copy, in order
        self.consumed_inside = set()  # (source op name, output index)
        self.late_controls = {}      # node index -> [source op names]
        self.late_classes = {}       # node index -> final _class values
        self.devices = {}            # node index -> device to restore
        self._keys = {}
        self._exists_ = {}

    def _external_key(self, src, index):
        key = self._keys.get((src, index))
        if key is not None:
            return key
        t = self.info.graph.get_tensor_by_name("{}:{}".format(src, index))
        t_ = self.external_tensor_fn(t)
        node = src
        while node in self.new_names:
            node += "/_ge_input"
        key = "{}:{}".format(node, index)
        self.input_map[key] = t_
        self._keys[(src, index)] = key
        self.inputs_.append(t_)
        return key

    def rewrite_inputs(self, position, node):
        new_inputs, late = [], []
        for entry in node.input:
            if entry.startswith("^"):
                src = entry[1:]
                if not self.inline_controls:
                    late.append(src)
                elif src in self.renamed:
                    new_inputs.append("^" + self.renamed[src])
                elif self.info.graph is self.info.graph_:
                    late.append(src)
                continue
            src, _, index = entry.partition(":")
            index = index or "0"
            if src in self.renamed:
                self.consumed_inside.add((src, int(index)))
                new_inputs.append(self.renamed[src] + ":" + index)
            else:
                new_inputs.append(self._external_key(src, index))
        node.input[:] = new_inputs
        if late:
            self.late_controls[position] = late

    def _exists(self, name):
        if name not in self._exists_:
            try:
                self.info.graph_.get_operation_by_name(name)
                self._exists_[name] = True
            except KeyError:
                self._exists_[name] = False
        return self._exists_[name]

    def rewrite_colocation(self, position, node):
        values = node.attr["_class"].list.s
        final, importable = [], []
        for value in values:
            if not value.startswith(_LOC):
                final.append(value)
                importable.append(value)
                continue
            name = value[len(_LOC):].decode()
            if name in self.renamed:
                new_value = _LOC + self.renamed[name].encode()
                final.append(new_value)
                importable.append(new_value)
            elif self.info.graph is self.info.graph_ or self._exists(name):
                final.append(value)
        if len(importable) != len(final):
            self.late_classes[position] = final
        if importable:
            node.attr["_class"].list.s[:] = importable
            self.devices[position] = node.device
        else:
            del node.attr["_class"]


def import_copy(info, external_tensor_fn, inline_controls):
    """Copy ``info.sgv.ops`` into ``info.graph_``; fill ``info.transformed_*``.

    Args:
      info: the transform's ``_TmpInfo``.
      external_tensor_fn: ``t -> t_`` for tensors produced outside the view.
      inline_controls: control inputs follow the default handler (inside:
        copied, outside: kept in the same graph, dropped across graphs);
        otherwise they are all left to the caller.
    Returns:
      ``(inputs_, outputs_)``, the boundary of the copy, and ``late_controls``
      (copied op -> source control input names still to connect).
    """
    ops = list(info.sgv.ops)
    src_names = [op.name for op in ops]
    new_names = [info.graph_.unique_name(info.new_name(name)) for name in src_names]
    renamed = dict(zip(src_names, new_names))
    graph_def = _source_graph_def(info.graph, ops, src_names,
                                  with_library=info.graph is not info.graph_)
    rewriter = _Rewriter(external_tensor_fn, info, renamed, inline_controls)
    for position, node in enumerate(graph_def.node):
        node.name = new_names[position]
        if node.input:
            rewriter.rewrite_inputs(position, node)
        if "_class" in node.attr:
            rewriter.rewrite_colocation(position, node)
        if node.op in ENTER_OPS:
            frame = node.attr["frame_name"]
            frame.s = info.new_frame_name(frame.s.decode()).encode()
    imported = tf.compat.v1.import_graph_def(
        graph_def, input_map=rewriter.input_map, return_elements=new_names, name="")
    for op, op_ in zip(ops, imported):
        info.transformed_ops[op] = op_
        for t, t_ in zip(op.outputs, op_.outputs):
            info.transformed_ts[t] = t_
    _fix_after_import(rewriter, imported)
    outputs_ = [t_ for op, op_ in zip(ops, imported) for index, t_ in enumerate(op_.outputs)
                if (op.name, index) not in rewriter.consumed_inside]
    late_controls = {imported[pos]: names for pos, names in rewriter.late_controls.items()}
    return rewriter.inputs_, outputs_, late_controls


def _fix_after_import(rewriter, imported):
    for position, values in rewriter.late_classes.items():
        op_ = imported[position]
        if values:
            op_._set_attr("_class", attr_value_pb2.AttrValue(  # pylint: disable=protected-access
                list=attr_value_pb2.AttrValue.ListValue(s=values)))
        else:
            op_._clear_attr("_class")  # pylint: disable=protected-access
    for position, device in rewriter.devices.items():
        op_ = imported[position]
        if op_.device != device:
            op_._set_device(device)  # pylint: disable=protected-access
