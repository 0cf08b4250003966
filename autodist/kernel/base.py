"""What every pass shares: the result it hands back, the resolver of tensor signatures, the item hand-over.

A pass is ``GraphItem -> PassResult``: the new item, and what the pass found
out that later stages need (the partition pass: how each variable was split),
as torch.fx passes return a ``PassResult``. GraphDef-level passes take their
input's GraphDef into a ``GraphDefEditor`` (an owned copy: the input is never
touched) and hand over a new GraphDef-backed item carrying the input's
records, info and train ops.
"""
import dataclasses

from tensorflow.core.framework import variable_pb2

from autodist.capture.graph_item import GraphItem
from autodist.kernel.graph_def_edit import GraphDefEditor
from autodist.plan.names import single_device_name

__all__ = ["PassResult", "signature_resolver", "editor_for", "hand_over", "register_variable"]


@dataclasses.dataclass(frozen=True)
class PassResult:
    """What a pass returns: the new item, and its ``details`` for the TransformResult (None: nothing)."""

    item: GraphItem
    details: object = None


def signature_resolver(graph):
    """name -> (dtype, shape) of the single-device tensor a (replicated) name derives from."""

    def resolve(name):
        try:
            tensor = graph.get_tensor_by_name(single_device_name(name))
        except (KeyError, ValueError):
            return None
        return tensor.dtype, tensor.shape

    return resolve


def editor_for(item, assignment, pass_name):
    return GraphDefEditor(item.graph_def, signature_resolver(assignment.analysis_graph), pass_name,
                          positions=getattr(item, "_positions", None))


def hand_over(editor, item):
    """A new GraphDef-backed item for the editor's graph with ``item``'s records."""
    result = GraphItem(graph_def=editor.graph_def)
    result._positions = editor.positions  # spares the next pass re-indexing the GraphDef
    result.info = item.info.copy()
    result.copy_gradient_info_from(item)
    return result


def register_variable(item, handle_op, initializer_op, trainable=False):
    """Record a variable a pass created, so that finalize initializes it."""
    item.info.variables.append(variable_pb2.VariableDef(variable_name=handle_op + ":0", initializer_name=initializer_op,
                                                        is_resource=True, trainable=trainable))
