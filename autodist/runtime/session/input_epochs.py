"""Why a node's tf.data iterator ends an epoch sooner than under AutoDist 0.7, said in the error that ends it.

The kernel keeps one iterator per node and its replicas draw distinct batches
(docs/input_pipelines.md); AutoDist copied the iterator into every replica.
"""
import tensorflow as tf

__all__ = ["explained_end_of_input"]


def explained_end_of_input(error, assignment):
    """``error`` (an OutOfRangeError) saying why an iterator ends sooner than under AutoDist 0.7, and what to do.

    The replicas of a node draw different batches from its one iterator, so an
    epoch lasts ``examples / (replicas x batch)`` steps. AutoDist copied the
    iterator into every replica, so each replayed the whole dataset and a loop
    of ``len(data) // batch`` steps per epoch fit; here it runs out part-way.
    The type stays OutOfRangeError: loops that end an epoch by catching it work.
    """
    replicas = len(assignment.local)
    if not assignment.analysis.input_pipeline or replicas < 2:
        return error
    message = ("{}\n[autodist] the input pipeline is exhausted. This node's {} replicas draw different batches from "
               "its one tf.data iterator, so a step consumes {} batches and an epoch of N examples lasts "
               "N // ({} * batch_size) steps, not N // batch_size (AutoDist 0.7 gave every replica its own copy of "
               "the iterator, so each replayed the whole dataset). Run N // ({} * batch_size) steps per epoch, or "
               "repeat() the dataset and count steps, or end the epoch when OutOfRangeError is raised; see "
               "docs/input_pipelines.md.").format(error.message, replicas, replicas, replicas, replicas)
    return tf.errors.OutOfRangeError(error.node_def, error.op, message)
