"""Walks over a TensorFlow graph that the kernel and the runtime share: what an op depends on, what a
tensor reaches, which op owns a resource handle and which ops take it.

    ancestors([train_op])                  every op the train op depends on (data and control edges)
    forward_ops([grad], within)            the ops of ``within`` a gradient reaches (data edges)
    resource_source(handle)                the variable op behind a handle, through Identity chains
    resource_users(graph, apply_ops)       variable op -> the apply ops that take its handle
"""
import tensorflow as tf

from autodist.capture.queries import ancestors   # capture asks it too; one answer, there

__all__ = ["ancestors", "forward_ops", "resource_source", "resource_users"]


def forward_ops(starts, within):
    """Ops whose names are in ``within`` reached from the tensors ``starts`` over data edges.

    Walks tensors rather than ops, so that an IdentityN carries output k
    forward only from input k (Keras passes all gradients through one).
    """
    found, seen, stack = set(), set(), list(starts)
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for consumer in tensor.consumers():
            if consumer.name not in within:
                continue
            found.add(consumer)
            if consumer.type == "IdentityN":
                stack.extend(consumer.outputs[i] for i, t in enumerate(consumer.inputs) if t is tensor)
            else:
                stack.extend(consumer.outputs)
    return found


def resource_source(tensor):
    """The op owning a resource tensor, looking through Identity chains."""
    op = tensor.op
    while op.type in ("Identity", "IdentityN") and op.inputs:
        op = op.inputs[0].op if op.type == "Identity" else op.inputs[tensor.value_index].op
    return op


def resource_users(graph, apply_ops):
    """variable op name -> apply ops that take its handle."""
    users = {}
    for name in apply_ops:
        op = graph.get_operation_by_name(name)
        for t in op.inputs:
            if t.dtype == tf.resource:
                users.setdefault(resource_source(t).name, set()).add(op)
    return users
