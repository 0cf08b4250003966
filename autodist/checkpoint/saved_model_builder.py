"""``autodist.checkpoint.saved_model_builder``, AutoDist's import path: the builder lives in ``saved_model``."""
from autodist.checkpoint.saved_model import SavedModelBuilder

__all__ = ["SavedModelBuilder"]
