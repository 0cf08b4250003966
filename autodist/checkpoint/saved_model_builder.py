"""``autodist.checkpoint.saved_model_builder``: AutoDist 0.7's import path, no logic of its own (``saved_model``)."""
from autodist.checkpoint.saved_model import SavedModelBuilder

__all__ = ["SavedModelBuilder"]
