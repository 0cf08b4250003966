"""The user API: ``AutoDist(resource_spec_file, strategy_builder).scope()``.

    ad = AutoDist("resource_specs/loopback_two_nodes.yml", strategy_builder=PS())
    with tf.Graph().as_default(), ad.scope():
        ...build the single-device model, loss, optimizer and train op...

Inside ``scope()`` the current default graph is wrapped in a GraphItem that is
the default GraphItem, and optimizer construction and ``apply_gradients`` are
captured into it (see ``autodist.capture``); on exit, also after an
exception, TensorFlow and Keras are exactly as before.
"""
import contextlib
import contextvars

import tensorflow as tf

from autodist.capture import capture_optimizers
from autodist.errors import CaptureError
from autodist.graph_item import GraphItem

__all__ = ["AutoDist", "SessionRequested", "intercept_session_requests"]

_intercept = contextvars.ContextVar("autodist_intercept_session_requests", default=False)


class SessionRequested(BaseException):
    """Raised by ``create_distributed_session`` inside ``intercept_session_requests()``.

    Tools that run a user's script only to look at its graph (``autodist plan``)
    stop it at the moment it asks for a session; ``autodist`` carries the
    AutoDist object, whose ``graph_item`` is the captured graph. A
    BaseException, so that a script's ``except Exception`` does not swallow it.
    """

    def __init__(self, autodist):
        super().__init__("the script asked for a distributed session")
        self.autodist = autodist


@contextlib.contextmanager
def intercept_session_requests():
    """Within the block, ``create_distributed_session`` raises ``SessionRequested``."""
    token = _intercept.set(True)
    try:
        yield
    finally:
        _intercept.reset(token)


class AutoDist:
    """Distributed training of a single-device graph over the devices of a resource spec."""

    def __init__(self, resource_spec_file, strategy_builder=None):
        from autodist.resource_spec import ResourceSpec
        self._resource_spec = ResourceSpec(resource_spec_file)
        self._strategy_builder = strategy_builder
        self._graph_item = None

    @property
    def resource_spec(self):
        return self._resource_spec

    @property
    def strategy_builder(self):
        if self._strategy_builder is None:
            from autodist.strategies import PSLoadBalancing
            self._strategy_builder = PSLoadBalancing()
        return self._strategy_builder

    @property
    def graph_item(self):
        """The GraphItem captured by the current (or last) ``scope()``, or None."""
        return self._graph_item

    @contextlib.contextmanager
    def scope(self):
        """Capture the default graph, its optimizer and its gradients into a GraphItem."""
        if tf.executing_eagerly():
            raise CaptureError(
                "AutoDist.scope() captures a graph, but eager execution is on here. Build the "
                "model inside a graph:\n    with tf.Graph().as_default(), ad.scope():\n        ...")
        graph = tf.compat.v1.get_default_graph()
        if self._graph_item is None or self._graph_item.graph is not graph:
            self._graph_item = GraphItem(graph=graph)
        with capture_optimizers(), self._graph_item.as_default():
            yield self
