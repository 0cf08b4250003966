"""What every pass shares: one base (name, requirements), the result it hands back, the item hand-over.

A pass is ``GraphItem -> PassResult``, as torch.fx's passes are
(``passes/infra/pass_base.py``): it subclasses :class:`Pass`, names itself,
says which passes must have run before it (``requires``), takes its
configuration in its constructor and returns the new item with what it found
out that later stages need (the partition pass: how each variable was split).
``kernel.graph_transformer`` declares the order and runs it (``run_passes``),
naming the failing pass and the passes before it. GraphDef-level passes take
their input's GraphDef into a ``GraphDefEditor`` (an owned copy: the input is
never touched) and hand over a new GraphDef-backed item carrying the input's
records, info and train ops.
"""
import abc
import dataclasses

from tensorflow.core.framework import variable_pb2

from autodist.capture.graph_item import GraphItem
from autodist.errors import TransformError
from autodist.kernel.graph_def_edit import GraphDefEditor
from autodist.plan.names import single_device_name

__all__ = ["Pass", "PassResult", "check_order", "signature_resolver", "editor_for", "hand_over", "register_variable"]


@dataclasses.dataclass(frozen=True)
class PassResult:
    """What a pass returns: the new item, and its ``details`` for the TransformResult (None: nothing)."""

    item: GraphItem
    details: object = None


class Pass(abc.ABC):
    """A kernel pass: ``pass_(item) -> PassResult``, never mutating ``item``.

    ``name`` names it in errors, details and graph dumps; ``requires`` names
    the passes that must have run before it (:func:`check_order` checks a
    declared order against them); ``rewrites`` is False for a step that only reads the graph and hands its
    findings to the passes after it (the assignment): it is not listed among
    the passes done, and its item is not dumped again.
    """

    name = None
    requires = ()
    rewrites = True

    @abc.abstractmethod
    def __call__(self, item):
        """The :class:`PassResult` of this pass on ``item``."""


def check_order(passes):
    """Raise ``TransformError`` naming the first pass (a class or an instance) whose ``requires`` are not all
    earlier in ``passes``: an order of passes is declared once (``graph_transformer.PIPELINE``) and checked."""
    seen = []
    for p in passes:
        missing = [name for name in getattr(p, "requires", ()) if name not in seen]
        if missing:
            raise TransformError("needs {} to run before it; the order is {}".format(
                ", ".join(repr(m) for m in missing), ", ".join(getattr(q, "name", "?") for q in passes)),
                pass_name=p.name)
        seen.append(p.name)


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
