"""The session an unmodified script gets from ``autodist run``.

A thin layer over ``DistributedSession`` that behaves like the
``tf.compat.v1.Session`` the script asked for:

    with tf.compat.v1.Session() as sess:      the graph and the session become the
        sess.run(init)                        defaults (``Tensor.eval()`` works); global
        loss.eval(feed_dict=...)              variable initializers are not run again

An initializer fetch is expanded into the ops it groups (``tf.group`` builds
NoOps whose control inputs are the initializers, one level per device):

    init (NoOp) --ctrl--> w/Assign, b/Assign, count/Assign
                 -> global variables w, b: skipped;  local variable count: run

so that a script's ``sess.run(tf.compat.v1.global_variables_initializer())``
does not reset what the other nodes are training, while resetting metrics
(local variables) still works.

Under ``autodist run --checkpoint-dir`` a resumed script's training calls up
to the checkpoint's step are passed over (``autorun.checkpoints.skipped_call``).
"""
import contextlib

import tensorflow as tf
from tensorflow.python.client import session as tf_session
from tensorflow.python.framework import stack as tf_stack

from autodist.runtime.autorun.checkpoints import skipped_call
from autodist.runtime.session.fetch_mapping import flatten_fetches

__all__ = ["AutorunSession"]

_MAX_GROUP_DEPTH = 16   # tf.group nests one level per device; deeper NoOp chains are not initializer groups


class AutorunSession(tf_session.SessionInterface):
    """``DistributedSession`` with tf.compat.v1.Session's defaults and initializer handling."""

    def __init__(self, distributed, graph, checkpoints=None):
        self._distributed = distributed
        self._checkpoints = checkpoints   # autorun.checkpoints.ScriptCheckpoints, or None
        self._graph = graph
        self._expanded = {}   # op name -> the op names to run instead ([] for a skipped initializer)
        self._contexts = []
        keys = tf.compat.v1.GraphKeys
        self._global_inits = {v.initializer.name for v in graph.get_collection(keys.GLOBAL_VARIABLES)}
        self._table_inits = {op.name for op in graph.get_collection(keys.TABLE_INITIALIZERS)}
        self._local_inits = {v.initializer.name for v in graph.get_collection(keys.LOCAL_VARIABLES)}

    @property
    def graph(self):
        return self._graph

    @property
    def distributed_session(self):
        return self._distributed

    @property
    def sess_str(self):
        return self._distributed.sess_str

    def _expand(self, op):
        """Names of the ops to run for fetching ``op``: global/table initializers drop out.

        Only groups made of initializers are taken apart. Any other grouping
        NoOp is run as it is: ``minimize()`` without a global step returns
        one too (the group of the variables' updates), and its copies carry
        the synchronization the distributed graph hangs on the train op.
        """
        if op.name not in self._expanded:
            if op.name in self._global_inits or op.name in self._table_inits:
                names = []
            elif self._initializer_group(op):
                names = [n for c in op.control_inputs for n in self._expand(c)]
            else:
                names = [op.name]
            self._expanded[op.name] = names
        return self._expanded[op.name]

    def _initializer_group(self, op, depth=0):
        """True for a NoOp whose control inputs are all initializers or such groups (``tf.group`` nests)."""
        if op.type != "NoOp" or op.inputs or not op.control_inputs or depth > _MAX_GROUP_DEPTH:
            return False
        return all(self._is_initializer(c) or self._initializer_group(c, depth + 1) for c in op.control_inputs)

    def _is_initializer(self, op):
        return op.name in self._global_inits or op.name in self._table_inits or op.name in self._local_inits

    def _split(self, leaf):
        """(names to fetch instead of ``leaf``, or None to fetch it as it is)."""
        if isinstance(leaf, (tf.Operation, str)):
            try:
                element = self._graph.as_graph_element(leaf)
            except (TypeError, ValueError, KeyError):
                return None
            if isinstance(element, tf.Operation):
                names = self._expand(element)
                return None if names == [element.name] else names
        return None

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        checkpoints = self._checkpoints
        if checkpoints is not None and checkpoints.skipping and self._distributed.trains(fetches) and \
                checkpoints.skip():
            return skipped_call(self._distributed, fetches, feed_dict, lambda f, feeds: self._run(f, feeds))
        return self._run(fetches, feed_dict, options, run_metadata)

    def _run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        leaves, pack = flatten_fetches(fetches)
        wanted, slots = [], []
        for leaf in leaves:
            names = self._split(leaf)
            if names is None:
                slots.append(len(wanted))
                wanted.append(leaf)
            else:
                slots.append(None)
                wanted.extend(names)
        values = self._distributed.run(wanted, feed_dict, options=options, run_metadata=run_metadata) if wanted \
            else []
        return pack([None if s is None else values[s] for s in slots])

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        feed_list = list(feed_list or [])

        def call(*args, **kwargs):
            options = kwargs.pop("options", None) if accept_options else None
            run_metadata = kwargs.pop("run_metadata", None) if accept_options else None
            return self.run(fetches, dict(zip(feed_list, args)), options=options, run_metadata=run_metadata)
        return call

    def partial_run_setup(self, fetches, feeds=None):
        return self._distributed.partial_run_setup(fetches, feeds)

    def partial_run(self, handle, fetches, feed_dict=None):
        return self._distributed.partial_run(handle, fetches, feed_dict)

    def as_default(self):
        """Make this the default session (for ``Tensor.eval()`` / ``Operation.run()``)."""
        return tf_stack.default_session(self)

    def close(self):
        self._distributed.close()

    def __enter__(self):
        stack = contextlib.ExitStack()
        stack.enter_context(self._graph.as_default())
        stack.enter_context(self.as_default())
        self._contexts.append(stack)
        return self

    def __exit__(self, *exc):
        self._contexts.pop().close()
        self.close()
