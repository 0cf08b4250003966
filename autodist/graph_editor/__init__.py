"""autodist.graph_editor: tf.contrib.graph_editor (TF 1.15) for TF 2.x graphs.

Edits ``tf.Graph`` objects built in graph mode (``tf.compat.v1``):

* ``util``: conversions ("anything convertible to a list of ops/tensors"),
  placeholders, control-output index;
* ``select``: filters, name scopes, graph walks;
* ``match``: ``OpMatcher``, patterns over an op and its neighbours;
* ``subgraph``: ``SubGraphView``, a value-like view on part of a graph;
* ``reroute``: re-plug tensors into other consumers (in place);
* ``edit``: detach / connect / bypass subgraphs (in place);
* ``transform``: copy or transform a subgraph into the same or another graph.

The graph to work on is always given explicitly (through the ops/tensors or a
``graph=`` argument); the default graph is never used implicitly. In-place
edits are seen only by sessions created after them.

Aliases: ``ph`` (a placeholder from dtype/shape), ``sgv`` (``make_view``),
``sgv_scope`` (``make_view_from_scope``).
"""
from autodist.graph_editor import edit
from autodist.graph_editor import match
from autodist.graph_editor import reroute
from autodist.graph_editor import select
from autodist.graph_editor import subgraph
from autodist.graph_editor import transform
from autodist.graph_editor import util
from autodist.graph_editor.edit import *  # noqa: F401,F403
from autodist.graph_editor.match import OpMatcher
from autodist.graph_editor.reroute import *  # noqa: F401,F403
from autodist.graph_editor.select import *  # noqa: F401,F403
from autodist.graph_editor.subgraph import *  # noqa: F401,F403
from autodist.graph_editor.transform import *  # noqa: F401,F403
from autodist.graph_editor.util import *  # noqa: F401,F403

ph = util.make_placeholder_from_dtype_and_shape
sgv = subgraph.make_view
sgv_scope = subgraph.make_view_from_scope

__all__ = (["edit", "match", "reroute", "select", "subgraph", "transform", "util",
            "OpMatcher", "ph", "sgv", "sgv_scope"]
           + edit.__all__ + reroute.__all__ + select.__all__ + subgraph.__all__
           + transform.__all__ + util.__all__)
