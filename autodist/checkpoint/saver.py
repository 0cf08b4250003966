"""Saver: ``tf.compat.v1.train.Saver``'s interface for distributed sessions.

    saver = autodist.checkpoint.Saver()          # inside the scope, after the model
    sess = ad.create_distributed_session()
    ...
    path = saver.save(sess, "ckpt/model", global_step=step)    # every node that calls it writes
    saver.restore(sess, path)                                  # every node calls it

A checkpoint holds the *original single-device layout*: each variable of the
user's graph under its op name (the name a plain tf1 Saver uses) with its full
shape, optimizer slots included, partitioned variables whole. So a plain
``tf.compat.v1.train.Saver`` restores it into the single-device graph, and a
distributed session under any strategy restores it (``layout``).

Save: as in AutoDist, every node that calls ``save`` writes the checkpoint to
its own disk: it reads every variable where it lives (``graph_ops.build_reads``:
its own replica's copy of a mirrored variable, a parameter server's variable
on that server) and writes one ``SaveV2`` file set from its own CPU. So a node
without a shared filesystem finds the checkpoint locally, and a plain
``tf.compat.v1.train.Saver`` restores it there. In synchronous training the
nodes write the same values. On a shared filesystem they write the same
files; TensorFlow writes each file (data, index, ``checkpoint`` state, meta
graph) to a temporary name and renames it, so no file is ever torn. With
asynchronous updates (``staleness``), the values can differ between nodes, so
give each node its own path (``ad.worker_index``) or let only the chief write.
``Saver(chief_only=True)`` does the latter: the other nodes write nothing and
return the same path. Bookkeeping (``checkpoint`` state file, ``max_to_keep``,
``keep_checkpoint_every_n_hours``) is TensorFlow's own Saver, on each writing
node, working through a ``SaverDef`` whose names this module gives its ops.

Restore: only the chief reads the file; the values reach the other nodes'
replicas by broadcast (``graph_ops.build_restore``), so the checkpoint only has
to exist on the chief, and every node must call ``restore`` at the same point
of the script (every node runs the same script, so it does).
"""
import os
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saver_pb2
from tensorflow.python.ops import io_ops

from autodist.checkpoint import binding
from autodist.checkpoint.graph_ops import build_reads, build_restore
from autodist.checkpoint.layout import layout, specs_of, variables_of
from autodist.checkpoint.original import export_meta_graph
from autodist.errors import CheckpointError

__all__ = ["Saver"]

_slots = weakref.WeakKeyDictionary()   # graph -> number of Savers created for it


def _next_slot(graph):
    _slots[graph] = _slots.get(graph, 0) + 1
    return _slots[graph]


def _checkpoint_path(save_path, step, pad):
    if step is None:
        return save_path
    return "{}-{}".format(save_path, "{:08d}".format(step) if pad else step)


class Saver:
    """Saves and restores the user's variables in their single-device layout (see the module docstring).

    Arguments are those of ``tf.compat.v1.train.Saver``. ``sharded`` and
    ``restore_sequentially`` are accepted and have no effect (a node writes
    one file set); ``reshape``, ``saver_def``, ``builder`` and V1 checkpoints
    are not supported. ``chief_only`` (autodist's own): only the chief writes
    when ``save`` is called; by default every node that calls it writes.
    """

    def __init__(self, var_list=None, reshape=False, sharded=False, max_to_keep=5,
                 keep_checkpoint_every_n_hours=10000.0, name=None, restore_sequentially=False, saver_def=None,
                 builder=None, defer_build=False, allow_empty=False, write_version=saver_pb2.SaverDef.V2,
                 pad_step_number=False, save_relative_paths=False, filename=None, *, chief_only=False):
        for flag, value in (("reshape", reshape), ("saver_def", saver_def), ("builder", builder)):
            if value:
                raise CheckpointError("autodist.checkpoint.Saver does not support {}=".format(flag))
        if write_version != saver_pb2.SaverDef.V2:
            raise CheckpointError("autodist.checkpoint.Saver writes V2 checkpoints only")
        if tf.executing_eagerly():
            raise CheckpointError("create the Saver inside `with ad.scope():`, after building the model")
        self._graph = tf.compat.v1.get_default_graph()
        self._var_list = var_list
        self._allow_empty = allow_empty
        self._chief_only = bool(chief_only)
        if var_list is not None:
            self._variables()
        self._slot = _next_slot(self._graph)
        self._scope = "AutoDist-Checkpoint/saver_{}/".format(self._slot)
        self._options = dict(max_to_keep=max_to_keep, keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
                             pad_step_number=pad_step_number, save_relative_paths=save_relative_paths)
        self._inner = None      # the tf1 Saver doing the bookkeeping
        self._plain = None      # the tf1 Saver for plain sessions of the graph

    def _variables(self):
        """{key: variable}; without a var_list, every global variable the graph has now.

        The set is taken when a session is first saved or restored (as
        ``defer_build`` does in TensorFlow), so optimizer slots that Keras or
        ``autodist.runtime.session.function`` create on the first step are included.
        """
        variables = variables_of(self._var_list, self._graph)
        if not variables and not self._allow_empty:
            raise CheckpointError("no variables to save; build the model before saving (or pass allow_empty=True)")
        return variables

    @property
    def specs(self):
        """``VariableSpec`` by checkpoint key, as a session bound now would see them."""
        return specs_of(self._variables())

    # -- tf1 Saver's bookkeeping, on our ops ----------------------------------------------
    def _saver_def(self):
        return saver_pb2.SaverDef(filename_tensor_name=self._scope + "filename:0",
                                  save_tensor_name=self._scope + "save:0", restore_op_name=self._scope + "restore",
                                  max_to_keep=self._options["max_to_keep"], sharded=False,
                                  keep_checkpoint_every_n_hours=self._options["keep_checkpoint_every_n_hours"],
                                  version=saver_pb2.SaverDef.V2)

    def _bookkeeper(self):
        if self._inner is None:
            with tf.Graph().as_default():
                self._inner = tf.compat.v1.train.Saver(saver_def=self._saver_def(), **self._options)
        return self._inner

    def _bind(self, session):
        """This Saver's ops in ``session``'s distributed graph (built once per session)."""
        cache = binding.session_cache(session)
        ops = cache.get(("saver", self._slot))
        if ops is not None:
            return ops
        if session.graph is not self._graph:
            raise CheckpointError("this Saver was created for another graph than the session's")
        result = session.transform_result
        assignment, graph = result.assignment, session.distributed_graph
        specs = specs_of(self._variables())
        entries = layout(result, specs)
        keys = [e.key for e in entries]
        with graph.as_default(), graph.name_scope(self._scope):
            with tf.device(binding.host_device(assignment)):
                filename = tf.compat.v1.placeholder_with_default("model", [], name="filename")
            sources = None
            if self._writes(assignment):
                values = build_reads(graph, assignment, entries, binding.host_device(assignment))
                with tf.device(binding.host_device(assignment)):
                    saved = io_ops.save_v2(filename, keys, [""] * len(keys), [values[k] for k in keys])
                    with tf.control_dependencies([saved]):
                        tf.identity(filename, name="save")
            if assignment.node.is_chief:
                with tf.device(binding.host_device(assignment)):
                    restored = io_ops.restore_v2(filename, keys, [""] * len(keys),
                                                 [e.spec.dtype for e in entries])
                sources = dict(zip(keys, restored))
            restore = build_restore(graph, assignment, entries, sources, self._slot, "restore")
        if restore[0].name != self._scope + "restore" or filename.name != self._scope + "filename:0":
            raise CheckpointError("the distributed graph already has ops under '{}'".format(self._scope))
        ops = cache[("saver", self._slot)] = (filename, restore, specs)
        return ops

    def _writes(self, assignment):
        """Whether this node writes when ``save`` is called: every node, or the chief alone (chief_only)."""
        return assignment.node.is_chief or not self._chief_only

    def _plain_saver(self, session):
        """A tf1 Saver for a plain session of the user's graph (no distribution)."""
        if session.graph is not self._graph:
            raise CheckpointError("this Saver was created for another graph than the session's")
        if self._plain is None:
            with session.graph.as_default():
                self._plain = tf.compat.v1.train.Saver(var_list=self._variables(), allow_empty=True, **self._options)
        return self._plain

    # -- the tf.compat.v1.train.Saver interface ------------------------------------------
    def save(self, sess, save_path, global_step=None, latest_filename=None, meta_graph_suffix="meta",
             write_meta_graph=True, write_state=True, strip_default_attrs=False, save_debug_info=False):
        """Write a checkpoint on this node (with ``chief_only``, on the chief only); returns its path prefix."""
        if not binding.is_distributed(sess):
            return self._plain_saver(sess).save(sess, save_path, global_step, latest_filename, meta_graph_suffix,
                                                write_meta_graph, write_state, strip_default_attrs, save_debug_info)
        step = _step(sess, global_step)
        if not self._variables():
            return None                       # an empty Saver (allow_empty=True) saves nothing, as in TensorFlow
        if not self._writes(sess.transform_result.assignment):
            return _checkpoint_path(save_path, step, self._options["pad_step_number"])
        self._bind(sess)
        with sess.distributed_graph.as_default():
            path = self._bookkeeper().save(binding.RawSession(sess), save_path, global_step=step,
                                           latest_filename=latest_filename, write_meta_graph=False,
                                           write_state=write_state)
        if write_meta_graph and path:
            self.export_meta_graph("{}.{}".format(path, meta_graph_suffix), strip_default_attrs=strip_default_attrs)
        return path

    def restore(self, sess, save_path):
        """Restore every variable of this Saver into every copy on every node (call it on every node)."""
        if not binding.is_distributed(sess):
            return self._plain_saver(sess).restore(sess, save_path)
        assignment = sess.transform_result.assignment
        if not self._variables():
            return None
        filename, restore, specs = self._bind(sess)
        if assignment.node.is_chief:
            _check_checkpoint(save_path, specs)
        binding.run_restore(sess, restore, {filename: save_path} if assignment.node.is_chief else None)
        return None

    @property
    def last_checkpoints(self):
        """The checkpoints this Saver keeps, oldest first (empty on a node that has not written)."""
        return self._inner.last_checkpoints if self._inner is not None else []

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time):
        self._bookkeeper().set_last_checkpoints_with_time(last_checkpoints_with_time)

    def recover_last_checkpoints(self, checkpoint_paths):
        self._bookkeeper().recover_last_checkpoints(checkpoint_paths)

    def export_meta_graph(self, filename=None, **kwargs):
        """The single-device graph with a plain Saver for these variables, as a MetaGraphDef."""
        if filename is not None:
            os.makedirs(os.path.dirname(os.path.abspath(filename)), exist_ok=True)
        return export_meta_graph(self._graph, specs_of(self._variables()), filename=filename, **kwargs)

    def as_saver_def(self):
        return self._saver_def()


def _step(sess, global_step):
    """The step number for the file name: an int, or the value of a step variable/tensor of the user's graph."""
    if global_step is None:
        return None
    if isinstance(global_step, (int, np.integer)):
        return int(global_step)
    return int(sess.run(global_step))


def _check_checkpoint(save_path, specs):
    """Raise CheckpointError before any collective starts if the file does not fit."""
    if save_path is None:
        raise CheckpointError("restore() got save_path=None; pass a checkpoint prefix, e.g. "
                              "tf.train.latest_checkpoint(directory)")
    try:
        reader = tf.train.load_checkpoint(save_path)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
        raise CheckpointError("cannot read a checkpoint at '{}': {}".format(save_path, e)) from None
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    missing = sorted(k for k in specs if k not in shapes)
    if missing:
        raise CheckpointError("checkpoint '{}' has no variable(s) {}".format(save_path, missing))
    for key, spec in sorted(specs.items()):
        if spec.shape.is_fully_defined() and list(shapes[key]) != spec.shape.as_list():
            raise CheckpointError("variable '{}' has shape {} in checkpoint '{}' but {} in the graph".format(
                key, list(shapes[key]), save_path, spec.shape.as_list()))
        if dtypes[key] != spec.dtype:
            raise CheckpointError("variable '{}' is {} in checkpoint '{}' but {} in the graph".format(
                key, dtypes[key].name, save_path, spec.dtype.name))
