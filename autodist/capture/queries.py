"""Graph queries: names, variables, and which ops write a variable.

Capture, the kernels and the runtime ask a ``tf.Graph`` the same few questions;
each has one answer, here.

Names. A GraphItem keeps everything by name, so names are normalized one way::

    tensor_name("W")   -> "W:0"          op_of("W:0") == op_of("^W") == "W"
    op_name(x)         -> the op name of an op, a tensor, a variable or a name

Variables. A Keras 3 variable wraps a ``tf.Variable`` (``tf_variable``); the
graph names a variable by its handle tensor (``variable_handle``); an op reaches
a variable through a chain of Identity ops (``source_op``).

Walks. ``ancestors(ops)``: every op they depend on, over data and control edges.

Writes. A variable's update op is a write (an assignment, a ``ResourceApply*``,
a scatter) that is neither its initializer nor a Saver's restore. When several
writes touch one variable, the update is the one its gradient reaches
(``forward_reachable``).
"""
import tensorflow as tf

__all__ = ["op_of", "tensor_name", "op_name", "tf_variable", "variable_handle", "source_op",
           "is_variable_write", "is_checkpoint_restore", "is_update_candidate", "forward_reachable",
           "ops_since", "variable_initializers", "ancestors", "HALF_DTYPES", "half_source", "half_gradient_dtypes"]


# -- names ---------------------------------------------------------------------------

def op_of(name):
    """Op name of a tensor or control reference ("x:1" -> "x", "^x" -> "x")."""
    return name[1:] if name.startswith("^") else name.split(":")[0]


def tensor_name(name):
    """Canonical tensor name ("x" -> "x:0")."""
    return name if ":" in name else name + ":0"


def op_name(x):
    """The op name of an op, a tensor, a variable or a name ("W:0" -> "W")."""
    if isinstance(x, str):
        return op_of(x)
    if isinstance(x, tf.Operation):
        return x.name
    return variable_handle(x).op.name


# -- variables -----------------------------------------------------------------------

def tf_variable(var):
    """The ``tf.Variable`` behind a variable-like object (Keras 3 variables wrap one)."""
    if isinstance(var, tf.Variable):
        return var
    inner = getattr(var, "value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError("expected a tf.Variable or a Keras variable, got {!r}".format(type(var).__name__))


def variable_handle(target):
    """The tensor that names a variable in the graph: the resource handle ("W:0")."""
    if isinstance(target, tf.Tensor):
        return target
    handle = getattr(target, "handle", None)
    if isinstance(handle, tf.Tensor):
        return handle
    ref = getattr(target, "_ref", None)
    if callable(ref):  # tf1 reference variables
        return ref()
    raise TypeError("cannot find the graph tensor of variable {!r}".format(target))


def source_op(tensor):
    """The op that produces ``tensor``, looking through Identity chains.

    For a resource tensor this is the op that owns the variable (its
    VarHandleOp); for a value, where it was computed (e.g. a RestoreV2).
    """
    op = tensor.op
    while op.type == "Identity" and op.inputs:
        op = op.inputs[0].op
    return op


# -- writes --------------------------------------------------------------------------

_WRITE_OP_TYPES = frozenset({
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "Assign", "AssignAdd", "AssignSub",
})
_WRITE_OP_PREFIXES = ("ResourceApply", "ResourceSparseApply", "ResourceScatter",
                      "Apply", "SparseApply", "Scatter")
_RESTORE_OP_TYPES = frozenset({"RestoreV2", "Restore", "RestoreSlice"})


def is_variable_write(op):
    """Whether ``op`` writes the variable it receives as its first input."""
    return op.type in _WRITE_OP_TYPES or op.type.startswith(_WRITE_OP_PREFIXES)


def is_checkpoint_restore(op):
    """Whether a variable write assigns a value read from a checkpoint (a Saver's restore)."""
    if len(op.inputs) < 2:
        return False
    return source_op(op.inputs[1]).type in _RESTORE_OP_TYPES


def is_update_candidate(op, initializers):
    """A variable write that is neither an initializer nor a checkpoint restore."""
    return is_variable_write(op) and op.name not in initializers and not is_checkpoint_restore(op)


def forward_reachable(grad, candidates, limit=200000):
    """Candidate ops reachable from ``grad`` over data and control edges.

    Walks tensors as well as ops, so that a multi-output op such as IdentityN
    only carries output k forward from input k; control edges matter because
    sparse tf1 optimizers order the variable update after slot scatters that
    have no outputs.
    """
    targets = set(candidates)
    frontier = [grad.values, grad.indices] if isinstance(grad, tf.IndexedSlices) else [grad]
    seen, found = set(), set()
    while frontier and len(seen) < limit:
        node = frontier.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, tf.Operation):
            if node in targets:
                found.add(node)
                continue
            frontier.extend(node.outputs)
            frontier.extend(node._control_outputs)
            continue
        for consumer in node.consumers():
            if consumer.type == "IdentityN" and consumer not in targets:
                frontier.extend(consumer.outputs[i] for i, t in enumerate(consumer.inputs) if t is node)
                frontier.extend(consumer._control_outputs)
            else:
                frontier.append(consumer)
    return found


HALF_DTYPES = (tf.float16, tf.bfloat16)


def half_source(tensor):
    """The half-precision tensor ``tensor`` was cast up from (a mixed-precision gradient), or None.

    Under Keras' ``mixed_float16`` / ``mixed_bfloat16`` a float32 weight is
    cast to half for the forward pass, so its gradient is the half gradient
    cast back up: ``Cast(g16) -> g32``.
    """
    if tensor.op.type != "Cast" or not tensor.op.inputs:
        return None
    source = tensor.op.inputs[0]
    return source if source.dtype in HALF_DTYPES and tensor.dtype in (tf.float32, tf.float64) else None


def half_gradient_dtypes(graph_item):
    """``{variable op name: half dtype}`` of the captured item's dense gradients computed in float16, the
    half dtype they can travel in (TensorFlow has no bfloat16 collective or accumulator kernels on CPUs;
    ``datasets.uneven.half_wire_dtypes`` says whether they do)."""
    found = {}
    for record in graph_item.grad_records:
        if record.is_sparse:
            continue
        source = half_source(graph_item.graph.get_tensor_by_name(record.grad))
        if source is not None and source.dtype == tf.float16:
            found[op_name(record.target)] = source.dtype
    return found


def ops_since(graph, first_id):
    """The ops made in ``graph`` since its version was ``first_id - 1``, in creation order.

    ``graph.version`` counts the ops (TensorFlow 2.21 numbers them from 2,
    so a version is not an op id): the new ops are those after the first
    ``first_id - 1`` in id order.
    """
    by_id = graph._nodes_by_id  # a property that builds a dict: read it once
    return [by_id[i] for i in sorted(by_id)[first_id - 1:]]


def variable_initializers(graph):
    """The initializer ops of the variables in ``graph``'s global and local collections."""
    keys = (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
    return {v.initializer for key in keys for v in graph.get_collection(key)
            if getattr(v, "initializer", None) is not None}


# -- walks ---------------------------------------------------------------------------

def ancestors(roots):
    """Every op ``roots`` depend on (data and control edges), the roots included."""
    seen, stack = set(), list(roots)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
