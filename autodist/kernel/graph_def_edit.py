"""Edit a GraphDef in place and splice in ops built with the normal TensorFlow API.

Passes work on GraphDefs, so that a replicated graph is imported once, at the
end, instead of once per pass. New ops are built in a small scratch
``tf.Graph`` in which existing tensors appear as placeholders; ``commit``
turns the placeholders back into references to the real tensors and appends
the new nodes:

    scratch graph                         target GraphDef
    __in_0 (Placeholder, "g:0")  ----+     ...existing nodes...
    AutoDist-PS/W/sum = AddN(__in_0,  |->  AutoDist-PS/W/sum = AddN(g:0, h:0)
                             __in_1)  |
    __in_1 (Placeholder, "h:0")  ----+

Static dtypes and shapes of existing tensors come from a resolver (the
single-device graph the names were derived from), and those of spliced
tensors are remembered for later scratch graphs.
"""
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2

from autodist.errors import TransformError
from autodist.capture.queries import op_of, tensor_name
from autodist.plan.names import REPLICA_PREFIX

__all__ = ["GraphDefEditor", "Scratch", "tensor_name", "op_of", "index_of"]

_PLACEHOLDER = "AutoDist-Splice-in-"
_CONTROL = "AutoDist-Splice-ctl-"


def index_of(graph_def):
    """{node name: position} of a GraphDef."""
    return {node.name: i for i, node in enumerate(graph_def.node)}


class GraphDefEditor:
    """An owned copy of a GraphDef with a name index; every edit is in place on the copy.

    ``positions`` (name -> index in ``graph_def.node``) may be passed in when
    the caller already has it for this GraphDef: indexing a large GraphDef
    from Python costs more than copying it.
    """

    def __init__(self, graph_def, resolve, pass_name, positions=None):
        self.graph_def = graph_pb2.GraphDef()
        self.graph_def.CopyFrom(graph_def)
        if positions is None or len(positions) != len(self.graph_def.node):
            positions = index_of(self.graph_def)
        self.positions = dict(positions)
        self._resolve = resolve
        self._known = {}
        self.pass_name = pass_name

    def node(self, name):
        try:
            return self.graph_def.node[self.positions[name]]
        except KeyError:
            raise TransformError("the graph has no op '{}'".format(name), pass_name=self.pass_name,
                                 op=name) from None

    def has(self, name):
        return name in self.positions

    def signature(self, name):
        """(tf.DType, tf.TensorShape) of a tensor of the graph."""
        name = tensor_name(name)
        if name in self._known:
            return self._known[name]
        found = self._resolve(name)
        if found is None:
            raise TransformError("cannot tell the dtype and shape of tensor '{}'".format(name),
                                 pass_name=self.pass_name, op=op_of(name))
        return found

    def set_input(self, consumer, index, new_name):
        node = self.node(consumer)
        if index >= len(node.input) or node.input[index].startswith("^"):
            raise TransformError("has no data input {}".format(index), pass_name=self.pass_name, op=consumer)
        node.input[index] = new_name

    def add_control_inputs(self, consumer, op_names):
        node = self.node(consumer)
        present = set(node.input)
        for name in op_names:
            entry = "^" + name
            if entry not in present and name != consumer:
                node.input.append(entry)
                present.add(entry)

    def disable(self, name, after):
        """Turn ``name`` into a NoOp that waits for the ops ``after`` (keeps its control inputs).

        The op no longer runs; whatever waited for it now waits for ``after``.
        Only ops without consumed outputs may be disabled (variable writes).
        """
        node = self.node(name)
        controls = [i for i in node.input if i.startswith("^")]
        device = node.device
        node.Clear()
        node.name, node.op, node.device = name, "NoOp", device
        node.input.extend(controls)
        self.add_control_inputs(name, after)

    def set_attr_s(self, name, key, value):
        self.node(name).attr[key].CopyFrom(attr_value_pb2.AttrValue(s=value.encode()))

    def scratch(self):
        return Scratch(self)

    def append(self, nodes, signatures):
        for node in nodes:
            if node.name in self.positions:
                raise TransformError("a spliced op collides with an existing op", pass_name=self.pass_name,
                                     op=node.name)
            self.graph_def.node.add().CopyFrom(node)
            self.positions[node.name] = len(self.graph_def.node) - 1
        self._known.update(signatures)

    def clone_for_replicas(self, names, template, replicas):
        """Copy the ops ``names``, built for replica ``template``, once for each of ``replicas``.

        Names, inputs, colocation and shared resource names that carry the
        template's prefix (``AutoDist-Replica-<i>/``) get the other replica's;
        the template's device becomes the replica's. Symmetric per-replica
        subgraphs are built once with TensorFlow and copied here, which costs
        a fraction of building each replica's ops again.
        """
        old = template.prefix
        sources = [self.node(n) for n in names]
        for replica in replicas:
            new = replica.prefix
            for src in sources:
                node = self.graph_def.node.add()
                node.CopyFrom(src)
                node.name = src.name.replace(old, new)
                node.input[:] = [i.replace(old, new) for i in src.input]
                if src.device == template.device:
                    node.device = replica.device
                elif src.device == template.host_cpu:
                    node.device = replica.host_cpu
                if "_class" in src.attr:
                    node.attr["_class"].list.s[:] = [v.replace(old.encode(), new.encode())
                                                     for v in src.attr["_class"].list.s]
                if "shared_name" in src.attr and src.attr["shared_name"].s:
                    node.attr["shared_name"].s = src.attr["shared_name"].s.replace(old.encode(), new.encode())
                if node.name in self.positions:
                    raise TransformError("a cloned op collides with an existing op", pass_name=self.pass_name,
                                         op=node.name)
                self.positions[node.name] = len(self.graph_def.node) - 1
        for name, signature in list(self._known.items()):
            if old in name:
                for replica in replicas:
                    self._known[name.replace(old, replica.prefix)] = signature


class Scratch:
    """A scratch graph whose new ops are spliced into a ``GraphDefEditor`` by ``commit``."""

    def __init__(self, editor):
        self.editor = editor
        self.graph = tf.Graph()
        self._tensors = {}
        self._real = {}  # stand-in tensor name -> the real tensor's name
        self._controls = {}
        # Every name the graph has is reserved, so that new ops get fresh ones;
        # replica copies are skipped (all under "AutoDist-Replica-<i>/", a prefix
        # scratch graphs never build under), which keeps this cheap.
        for name in editor.positions:
            if not name.startswith(REPLICA_PREFIX):
                self.graph.unique_name(name, mark_as_used=True)

    def tensor(self, name, dtype=None, shape=None):
        """A stand-in in the scratch graph for the existing tensor ``name``."""
        name = tensor_name(name)
        if name not in self._tensors:
            if dtype is None:
                dtype, known_shape = self.editor.signature(name)
                shape = known_shape if shape is None else shape
            # Outside any control-dependency context: TF leaves out the control
            # inputs of an op whose input was made in the same context, and the
            # stand-in, which would carry them, is dropped on commit.
            with self.graph.as_default(), self.graph.name_scope(None), self.graph.control_dependencies(None):
                placeholder = tf.compat.v1.placeholder(
                    dtype, shape=shape, name="{}{}".format(_PLACEHOLDER, len(self._tensors)))
            self._tensors[name] = placeholder
            self._real[placeholder.name] = name
        return self._tensors[name]

    def name_of(self, tensor):
        """The name ``tensor`` has after ``commit``: the real tensor's for a stand-in."""
        return self._real.get(tensor.name, tensor.name)

    def control(self, op_name):
        """A stand-in for the existing op ``op_name``, for control dependencies."""
        if op_name not in self._controls:
            with self.graph.as_default(), self.graph.name_scope(None), self.graph.control_dependencies(None):
                self._controls[op_name] = tf.no_op(name="{}{}".format(_CONTROL, len(self._controls)))
        return self._controls[op_name]

    def commit(self):
        """Append the scratch graph's new ops to the editor's GraphDef; returns their names."""
        real = {p.op.name: name for name, p in self._tensors.items()}
        real_ops = {c.name: name for name, c in self._controls.items()}
        nodes, signatures = [], {}
        for op in self.graph.get_operations():
            if op.name in real or op.name in real_ops:
                continue
            node = op.node_def
            node.ClearField("input")
            node.input.extend(self._input_name(t, real) for t in op.inputs)
            node.input.extend("^" + real_ops.get(c.name, c.name) for c in op.control_inputs)
            if "_class" in node.attr:
                values = [b"loc:@" + _real_op(v[5:].decode(), real, real_ops).encode()
                          for v in node.attr["_class"].list.s]
                node.attr["_class"].list.s[:] = values
            nodes.append(node)
            for t in op.outputs:
                signatures[t.name] = (t.dtype, t.shape)
        self.editor.append(nodes, signatures)
        return [n.name for n in nodes]

    @staticmethod
    def _input_name(tensor, real):
        if tensor.op.name in real:
            return real[tensor.op.name]
        return tensor.name


def _real_op(name, real, real_ops):
    if name in real:
        return op_of(real[name])
    return real_ops.get(name, name)
