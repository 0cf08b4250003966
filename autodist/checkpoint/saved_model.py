"""SavedModelBuilder: export the single-device graph with a distributed session's variable values.

    builder = autodist.checkpoint.SavedModelBuilder("export/1")
    builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={
        "serving_default": tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})})
    builder.save()                          # the chief writes; other nodes do nothing

``saver=`` (AutoDist's guide passes its Saver) is accepted when it saves every
global variable under its own name, which is what the export holds.

The export is what ``tf.compat.v1.saved_model.Builder`` writes for the user's
single-device graph: the graph is re-imported into a plain graph (names
unchanged, devices cleared; ``original.plain_copy``), its variables take the
values the chief reads from the distributed session (in the original layout,
partitioned variables whole), and TensorFlow's builder exports that plain
session. Signatures, ``main_op`` and ``legacy_init_op`` name tensors and ops of
the user's graph; they mean the same in the copy. ``tf.compat.v1.saved_model.loader.load``
in a plain session serves the result.
"""
import os

import tensorflow as tf
from tensorflow.python.util import compat

from autodist.checkpoint import binding
from autodist.checkpoint.layout import specs_of, variables_of
from autodist.checkpoint.original import assign_values, plain_copy
from autodist.checkpoint.saver import Saver
from autodist.errors import CheckpointError

__all__ = ["SavedModelBuilder"]


def _in_copy(copy, element):
    """The op or tensor of ``copy`` with the name of ``element`` (from the user's graph), or None."""
    if element is None:
        return None
    return copy.as_graph_element(element if isinstance(element, str) else element.name)


def _check_saver(saver, graph):
    """Accept ``saver`` (AutoDist's guide passes one) if it saves what the export saves.

    The export holds every global variable under its op name, as a default
    ``autodist.checkpoint.Saver`` does; a Saver of a subset or with other names
    would describe another SavedModel, so it is refused with the difference.
    """
    if saver is None or graph is None:
        return
    if not isinstance(saver, Saver):
        raise CheckpointError("saver= must be an autodist.checkpoint.Saver (got {}); the export saves every "
                              "global variable, so you can also leave it out".format(type(saver).__name__))
    exported = {key: spec.op_name for key, spec in specs_of(variables_of(None, graph)).items()}
    given = {key: spec.op_name for key, spec in saver.specs.items()}
    if given != exported:
        missing, extra = sorted(set(exported) - set(given)), sorted(set(given) - set(exported))
        raise CheckpointError("the saver passed to SavedModelBuilder does not save every global variable under "
                              "its own name (missing: {}; other keys: {}); pass a Saver() without var_list, or "
                              "none".format(missing or "none", extra or "none"))


class SavedModelBuilder:
    """``tf.compat.v1.saved_model.Builder`` for distributed (and plain) sessions of the user's graph."""

    def __init__(self, export_dir):
        self._export_dir = export_dir
        self._builder = None
        self._copy = None
        self._graph = None      # the user's graph, once add_meta_graph_and_variables saw it
        self._writes = True

    def add_meta_graph_and_variables(self, sess, tags, signature_def_map=None, assets_collection=None,
                                     legacy_init_op=None, clear_devices=False, main_op=None,
                                     strip_default_attrs=False, saver=None):
        """Add the single-device graph with the session's variable values (the chief only).

        Arguments are those of ``tf.compat.v1.saved_model.Builder``; ops
        (``main_op``, ``legacy_init_op``) are ops of the user's graph. Devices
        are always cleared, and every global variable is saved. ``saver``, which
        AutoDist's guide passes, may be an ``autodist.checkpoint.Saver`` that
        saves exactly those variables under their own names (the default Saver).
        """
        if self._builder is not None or not self._writes:
            raise CheckpointError("add_meta_graph_and_variables() was already called on this builder; add "
                                  "further meta graphs with add_meta_graph()")
        _check_saver(saver, sess.graph)
        distributed = binding.is_distributed(sess)
        if distributed and not sess.transform_result.assignment.node.is_chief:
            self._writes = False
            return
        graph = self._graph = sess.graph
        variables = variables_of(None, graph)
        specs = specs_of(variables)
        values = binding.read_state(sess, specs) if distributed else sess.run(dict(variables))
        copy, copied = plain_copy(graph, specs)
        self._copy = copy
        with copy.as_default(), tf.compat.v1.Session(graph=copy) as plain:
            assign_values(plain, copied, values)
            self._builder = tf.compat.v1.saved_model.Builder(self._export_dir)
            self._builder.add_meta_graph_and_variables(
                plain, tags, signature_def_map=signature_def_map, assets_collection=assets_collection,
                legacy_init_op=_in_copy(copy, legacy_init_op), clear_devices=True, main_op=_in_copy(copy, main_op),
                strip_default_attrs=strip_default_attrs)

    def add_meta_graph(self, tags, signature_def_map=None, assets_collection=None, legacy_init_op=None,
                       clear_devices=False, main_op=None, strip_default_attrs=False, saver=None):
        """Add another meta graph (same graph and variables, other tags or signatures)."""
        if not self._writes:
            return
        if self._builder is None:
            raise CheckpointError("call add_meta_graph_and_variables() before add_meta_graph()")
        _check_saver(saver, self._graph)
        with self._copy.as_default():
            self._builder.add_meta_graph(tags, signature_def_map=signature_def_map,
                                         assets_collection=assets_collection,
                                         legacy_init_op=_in_copy(self._copy, legacy_init_op), clear_devices=True,
                                         main_op=_in_copy(self._copy, main_op),
                                         strip_default_attrs=strip_default_attrs)

    def save(self, as_text=False):
        """Write the SavedModel (the chief only); returns the path of its saved_model.pb on every node."""
        if not self._writes:
            return compat.as_bytes(os.path.join(self._export_dir, "saved_model.pbtxt" if as_text else "saved_model.pb"))
        if self._builder is None:
            raise CheckpointError("call add_meta_graph_and_variables() before save()")
        return self._builder.save(as_text=as_text)
