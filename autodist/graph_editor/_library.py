"""Function libraries: which FunctionDefs a set of nodes needs, and importing them.

TF 2.x control flow (``While``/``If``) and ``tf.function`` calls refer to
functions by name; the bodies live in the graph's function library. Copying
such an op into another graph must bring the bodies along, transitively
(a ``While`` body may call an ``If`` whose branches call a ``tf.function``),
with the gradient functions registered for them.
"""
import tensorflow as tf
from tensorflow.core.framework import function_pb2
from tensorflow.core.framework import graph_pb2


def graph_may_have_functions(graph):
    """Cheap pre-check: False only when the graph surely has no function."""
    functions = getattr(graph, "_functions", None)
    return functions is None or bool(functions)


def _attr_functions(attr_value, found):
    kind = attr_value.WhichOneof("value")
    if kind == "func":
        found.add(attr_value.func.name)
        for nested in attr_value.func.attr.values():
            _attr_functions(nested, found)
    elif kind == "list":
        for func in attr_value.list.func:
            found.add(func.name)
            for nested in func.attr.values():
                _attr_functions(nested, found)


def node_functions(node_def, library_names):
    """Names of the library functions a NodeDef calls (by op type or attribute)."""
    found = set()
    if node_def.op in library_names:
        found.add(node_def.op)
    for attr_value in node_def.attr.values():
        _attr_functions(attr_value, found)
    return found & library_names


def library_closure(node_defs, library):
    """The part of ``library`` (a FunctionDefLibrary) that ``node_defs`` need.

    Returns a FunctionDefLibrary, empty when the nodes call no function.
    """
    by_name = {fdef.signature.name: fdef for fdef in library.function}
    gradients = {grad.function_name: grad for grad in library.gradient}
    names = set(by_name)
    pending = set()
    for node_def in node_defs:
        pending |= node_functions(node_def, names)
    needed = set()
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        for inner in by_name[name].node_def:
            pending |= node_functions(inner, names) - needed
        grad = gradients.get(name)
        if grad is not None and grad.gradient_func in names:
            pending.add(grad.gradient_func)
    result = function_pb2.FunctionDefLibrary()
    result.function.extend(fdef for name, fdef in by_name.items() if name in needed)
    result.gradient.extend(grad for name, grad in gradients.items() if name in needed)
    return result


def import_library(library, dst_graph, versions):
    """Register the functions of ``library`` in ``dst_graph``. Mutates ``dst_graph``.

    Functions already there with the same definition are left as they are;
    a different definition under the same name makes TensorFlow raise.
    """
    if not library.function:
        return
    graph_def = graph_pb2.GraphDef(library=library)
    graph_def.versions.CopyFrom(versions)
    with dst_graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
