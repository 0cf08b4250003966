"""TensorBoard scalars of a job and graphs of a plan, written with TensorFlow's own event writer.

    ScalarLog(logdir, node=1, bytes_per_step=4096)     <logdir>/node-1/events.out.tfevents...
        .step(seconds, examples)     autodist/step_time_s, autodist/examples_per_s, autodist/bytes_per_step
        .scalar("loss", 0.25)        the user's own values (AutoDist.log_scalar), at the current step
    write_graph(logdir, graph_def)   a graph for TensorBoard's graph view (``autodist plan --dump-graphs``)

One run directory per node, so TensorBoard draws one line per node
(``tensorboard --logdir <logdir>``). The step of a value is the node's
session call count. ``bytes_per_step`` is what the plan report
(``autodist.strategies.report``) says this node's devices send and receive
per step. Events are flushed every ``FLUSH_SECS`` s and when the process exits.
"""
import atexit
import os

from autodist.runtime.watch.timeline import writable_directory

__all__ = ["ScalarLog", "write_graph", "FLUSH_SECS", "node_bytes_per_step"]

FLUSH_SECS = 5


def _file_writer(logdir, graph=None):
    """A ``tf.compat.v1.summary.FileWriter`` (which refuses eager mode: made inside a graph)."""
    import tensorflow as tf
    with tf.Graph().as_default():
        return tf.compat.v1.summary.FileWriter(logdir, graph=graph, flush_secs=FLUSH_SECS)


def _summary(values):
    import tensorflow as tf
    return tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value))
                                       for tag, value in values])


def node_bytes_per_step(report, task, address):
    """Bytes sent plus received per step by one node's devices in a ``PlanReport``.

    A compiled strategy names them ``/job:worker/task:<task>/device:...``, a
    builder's ``<address>:CPU:0``; both are recognised.
    """
    marker = "/task:{}/".format(task)
    return sum(d.sent_bytes + d.received_bytes for d in report.devices
               if marker in d.device or d.device.startswith(address + ":"))


class ScalarLog:
    """Per-step scalars of one node (see the module docstring)."""

    def __init__(self, logdir, node, bytes_per_step=None, address="this node"):
        self.path = writable_directory(os.path.join(os.path.expanduser(logdir), "node-{}".format(node)),
                                       "TensorBoard", address)
        self._writer = _file_writer(self.path)
        self._bytes = bytes_per_step
        self.steps = 0
        self._closed = False
        atexit.register(self.close)

    def step(self, seconds, examples):
        """One session call took ``seconds`` for ``examples`` rows of this node's feeds."""
        self.steps += 1
        values = [("autodist/step_time_s", seconds)]
        if examples and seconds > 0:
            values.append(("autodist/examples_per_s", examples / seconds))
        if self._bytes is not None:
            values.append(("autodist/bytes_per_step", self._bytes))
        self._writer.add_summary(_summary(values), self.steps)

    def scalar(self, tag, value, step=None):
        """The user's value ``tag`` (e.g. ``"loss"``) at ``step`` (default: the last session call)."""
        self._writer.add_summary(_summary([(tag, value)]), self.steps if step is None else int(step))

    def close(self):
        if not self._closed:
            self._closed = True
            self._writer.close()


def write_graph(logdir, graph_def):
    """One event file in ``logdir`` holding ``graph_def`` for TensorBoard's graph view."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    writer = _file_writer(logdir, graph=graph)
    writer.flush()
    writer.close()
    return logdir

