"""Finalize: the init op, job-scoped resources and importable colocation.

- Adds the node's init ops (``initialization.build_init_ops``).
- Puts every stateful resource with an empty ``container`` into the job's
  container (``names.job_container``), so two jobs sharing long-lived
  servers never meet in a resource manager (and ``Session.reset`` can drop
  one job's state).
- Drops colocation entries (``_class: loc:@x``) that name ops this node's graph
  does not have; ``import_graph_def`` rejects them.
"""
from autodist.kernel.base import Pass, PassResult, editor_for, hand_over
from autodist.kernel.initialization import build_init_ops
from autodist.plan.names import job_container

__all__ = ["Finalizer"]


class Finalizer(Pass):
    """The finalize pass."""

    name = "finalize"
    requires = ("sync_between_graph",)

    def __init__(self, assignment):
        self.assignment = assignment

    def __call__(self, item):
        editor = editor_for(item, self.assignment, self.name)
        build_init_ops(editor, self.assignment, item)
        container = job_container(self.assignment.node.job_id).encode()
        names = editor.positions
        for node in editor.graph_def.node:
            if "container" in node.attr and not node.attr["container"].s and node.op != "Placeholder":
                node.attr["container"].s = container
            if "_class" in node.attr:
                kept = [v for v in node.attr["_class"].list.s if v[5:].decode() in names]
                if len(kept) != len(node.attr["_class"].list.s):
                    if kept:
                        node.attr["_class"].list.s[:] = kept
                    else:
                        del node.attr["_class"]
        return PassResult(hand_over(editor, item))
