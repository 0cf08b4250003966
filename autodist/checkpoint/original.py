"""The single-device graph as a plain TensorFlow graph: for meta graphs and SavedModels.

``plain_copy(graph, specs)`` re-imports the user's graph (devices cleared, the
variable collections kept) into a new ``tf.Graph`` and returns the copy with
its variables by checkpoint key. Names are unchanged, so tensor names of the
user's graph (signatures, train ops) mean the same thing in the copy, and a
plain ``tf.compat.v1.train.Saver`` over it reads checkpoints written by
``autodist.checkpoint.Saver``.
"""
import tensorflow as tf

from autodist.errors import CheckpointError

__all__ = ["plain_copy", "export_meta_graph", "assign_values"]


def plain_copy(graph, specs):
    """(copy of ``graph``, {key: variable of the copy}) for ``specs`` (``VariableSpec`` by key)."""
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=graph, clear_devices=True)
    copy = tf.Graph()
    with copy.as_default():
        tf.compat.v1.train.import_meta_graph(meta, clear_devices=True)
        by_op = {v.op.name: v for v in tf.compat.v1.global_variables() + tf.compat.v1.local_variables()}
    missing = sorted(spec.op_name for spec in specs.values() if spec.op_name not in by_op)
    if missing:
        raise CheckpointError("variables {} are not in the graph's variable collections".format(missing))
    return copy, {key: by_op[spec.op_name] for key, spec in specs.items()}


def export_meta_graph(graph, specs, filename=None, **kwargs):
    """The single-device MetaGraphDef with a plain Saver over ``specs`` (``import_meta_graph`` restores it)."""
    copy, variables = plain_copy(graph, specs)
    with copy.as_default():
        saver = tf.compat.v1.train.Saver(var_list=variables, allow_empty=True)
        return tf.compat.v1.train.export_meta_graph(filename=filename, graph=copy, saver_def=saver.as_saver_def(),
                                                    clear_devices=True, **kwargs)


def assign_values(session, variables, values):
    """Give the variables of a plain session ``values`` (both by key); initialize every other variable."""
    graph = session.graph
    with graph.as_default():
        holders = {key: tf.compat.v1.placeholder(var.dtype.base_dtype, var.shape) for key, var in variables.items()}
        assigns = [variables[key].assign(holders[key]) for key in variables]
        given = {variables[key].op.name for key in variables}
        others = [v for v in tf.compat.v1.global_variables() + tf.compat.v1.local_variables()
                  if v.op.name not in given]
        init = tf.compat.v1.variables_initializer(others)
    session.run(init)
    session.run(assigns, {holders[key]: values[key] for key in variables})
