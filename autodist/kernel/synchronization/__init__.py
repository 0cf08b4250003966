"""Synchronization passes: in-graph (within this node) and between graphs (across nodes).

``SyncInGraph`` reduces this node's replica gradients of parameter-server
variables into one. ``SyncBetweenGraph`` adds what crosses process
boundaries (accumulators and tokens for parameter servers, collectives for
all-reduce, proxies and the staleness barrier), wires the synchronized
gradients into the optimizer's updates, and makes every replica's copy of the
train ops wait for the step's synchronization.
"""
from autodist.kernel.base import Pass, PassResult, editor_for, hand_over, register_variable
from autodist.kernel.synchronization.all_reduce import synchronize_all_reduce
from autodist.kernel.synchronization.proxy import add_proxies
from autodist.kernel.synchronization.ps import reduce_locally, synchronize_ps

__all__ = ["SyncInGraph", "SyncBetweenGraph"]


class SyncInGraph(Pass):
    """Local reduction of parameter-server gradients."""

    name = "sync_in_graph"
    requires = ("replicate",)

    def __init__(self, assignment):
        self.assignment = assignment

    def __call__(self, item):
        editor = editor_for(item, self.assignment, self.name)
        reduce_locally(editor, self.assignment)
        return PassResult(hand_over(editor, item))


class SyncBetweenGraph(Pass):
    """Cross-node aggregation, update wiring and the per-step synchronization ops.

    ``accumulating``: gradients are accumulated over several calls; train ops
    that update at every call then synchronize apart
    (``Assignment.sync_groups``).
    """

    name = "sync_between_graph"
    requires = ("sync_in_graph",)

    def __init__(self, assignment, accumulating=False):
        self.assignment = assignment
        self.accumulating = accumulating

    def __call__(self, item):
        editor = editor_for(item, self.assignment, self.name)
        new_vars = []
        for view, train_ops in self.assignment.sync_groups(self.accumulating):
            steps = synchronize_ps(editor, view)
            proxy_steps, proxy_vars = add_proxies(editor, view, steps[0]) if steps else ([], [])
            ar_steps, ar_vars = synchronize_all_reduce(editor, view)
            steps = steps + proxy_steps + ar_steps
            for replica in view.local:
                for train_op in train_ops:
                    editor.add_control_inputs(replica.prefix + train_op, steps)
            new_vars += proxy_vars + ar_vars
        result = hand_over(editor, item)
        for handle, init in new_vars:
            register_variable(result, handle, init)
        return PassResult(result)
