"""``autodist.graph_item``: AutoDist 0.7's import path, no logic of its own (names of ``capture.graph_item``)."""
from autodist.capture.graph_item import (GradRecord, GraphItem, Info, cached_property, default_graph_item,
                                         get_default_graph_item, wrap_optimizer_apply_gradient, wrap_optimizer_init)

__all__ = ["cached_property", "get_default_graph_item", "default_graph_item", "wrap_optimizer_init",
           "wrap_optimizer_apply_gradient", "Info", "GradRecord", "GraphItem"]
