"""Capture: the user's single-device graph, optimizer and gradients, as a GraphItem.

    graph_item   GraphItem (AutoDist's module: also names the recording API below)
    recording    the default GraphItem of the thread; wrap_optimizer_init and
                 wrap_optimizer_apply_gradient, which record optimizers into it
    optimizers   capture_optimizers(): every optimizer class wrapped with those
                 decorators for the length of a scope, restored on exit
    keras        Keras 3 in a tf1 graph: guarded fit/evaluate/predict, state
                 updates, one ordered train op per apply_gradients
    info         what a GraphItem records by name: Info (variables, tables,
                 savers) and GradRecords
    queries      graph queries: names, variables, which ops write a variable
    files        GraphItem files (protobuf, written atomically)
    fingerprint  what every process of a job must agree on, and the first difference of two
    datasets/    tf.data iterators made in a scope: automatic sharding, uneven inputs'
                 look-ahead and state variable (``capture_datasets``)

Dependencies go one way: optimizers -> recording -> keras -> queries, and
graph_item -> recording, info, files -> queries; no other module here imports graph_item
or optimizers. ``autodist.graph_item`` is the public name of ``graph_item``.
"""
from autodist.capture.graph_item import GradRecord, GraphItem, Info, default_graph_item, get_default_graph_item
from autodist.capture.optimizers import capture_optimizers
from autodist.capture.recording import wrap_optimizer_apply_gradient, wrap_optimizer_init

__all__ = ["GraphItem", "Info", "GradRecord", "default_graph_item", "get_default_graph_item", "capture_optimizers",
           "wrap_optimizer_init", "wrap_optimizer_apply_gradient"]
