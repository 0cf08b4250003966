"""Finalize: the init op, job-scoped resources and importable colocation.

- Adds the node's init ops (``initialization.build_init_ops``).
- Puts every stateful resource with an empty ``container`` into the job's
  container, so two jobs sharing long-lived servers never meet in a resource
  manager (and ``Session.reset`` can drop one job's state).
- Drops colocation entries (``_class: loc:@x``) that name ops this node's graph
  does not have; ``import_graph_def`` rejects them.
"""
from autodist.kernel.base import editor_for, hand_over
from autodist.kernel.initialization import build_init_ops

__all__ = ["Finalizer", "job_container"]


def job_container(job_id):
    return "autodist-" + job_id


class Finalizer:
    """The finalize pass."""

    name = "finalize"

    def __init__(self, plan):
        self.plan = plan

    def __call__(self, item):
        editor = editor_for(item, self.plan, self.name)
        build_init_ops(editor, self.plan, item)
        container = job_container(self.plan.node.job_id).encode()
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
        return hand_over(editor, item)
