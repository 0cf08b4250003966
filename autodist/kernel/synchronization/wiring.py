"""Connecting a synchronized gradient to a replica's optimizer update.

    before                                   after (the applying replica)
    g^r ---> ResourceApplyAdam(W, m, v, g)   agg ---> ResourceApplyAdam(W, m, v, agg)

Only the gradient's consumers inside the apply part are rerouted (the same
tensor may also feed the forward pass, e.g. the ids of an embedding lookup).
Replicas that must not apply a parameter-server update get their writes of
that variable and its slots turned into NoOps that wait for the update to be
done elsewhere.
"""
from autodist.kernel.graph_def_edit import tensor_name

__all__ = ["reroute_gradient", "disable_writes", "state_writes", "shared_state_of", "is_global_sync"]


def is_global_sync(var, assignment):
    """Whether parameter-server variable ``var`` is synchronized across the job's nodes every step (the
    chief applies every node's gradients, then releases them): synchronous, no staleness, several nodes."""
    sync = var.synchronizer
    return sync.sync and sync.staleness == 0 and assignment.node.num_tasks > 1


def reroute_gradient(editor, analysis, var_op, prefix, new_components):
    """In ``prefix``'s replica, feed ``new_components`` (component -> tensor name) to the apply ops."""
    for entry in analysis.grad_inputs[var_op]:
        if entry.component not in new_components:
            continue
        editor.set_input(prefix + entry.consumer, entry.index, tensor_name(new_components[entry.component]))


def shared_state_of(assignment, var_op):
    """The parameter-server variable, its slots and the shared state it keeps (op names)."""
    return {var_op} | set(assignment.analysis.owned_state(var_op))


def state_writes(assignment, var_op):
    """Apply-part ops (single-device names) that write ``var_op`` or one of its slots."""
    owned = shared_state_of(assignment, var_op)
    by_target = assignment.analysis.writes_by_target
    return sorted(op for target in owned for op in by_target.get(target, ()))


def disable_writes(editor, assignment, var_op, prefix, after):
    """Make ``prefix``'s update of ``var_op``'s state wait for ``after`` instead of running.

    Every apply op that reads or writes the variable or its slots (and what is
    computed from them) becomes a NoOp: a replica that does not apply the
    update never touches the server's copy while another replica updates it.
    """
    ops = set(assignment.analysis.state_ops[var_op]) | set(state_writes(assignment, var_op))
    for op in sorted(ops):
        editor.disable(prefix + op, after)
