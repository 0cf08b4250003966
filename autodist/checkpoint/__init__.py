"""Checkpoints and SavedModels of distributed sessions, in the single-device layout.

``Saver`` has ``tf.compat.v1.train.Saver``'s interface and writes what a plain
Saver on the single-device graph would write; ``SavedModelBuilder`` exports
the single-device graph with its signatures and the distributed session's
variable values. See ``docs/checkpoints.md``.
"""
from autodist.checkpoint.saved_model import SavedModelBuilder
from autodist.checkpoint.saver import Saver

__all__ = ["Saver", "SavedModelBuilder"]
