"""Keras' ``model.fit`` / ``evaluate`` / ``predict`` of a model compiled in ``AutoDist.scope()``, distributed.

    fit            the loops and callbacks, as Keras runs them on one device
    data           the global batches, dealt as Keras deals them
    steps          the traced steps (through ``ad.function``), metric state synchronized
    custom_step    a model's own ``train_step`` / ``test_step`` / ``predict_step``
    state          the model's weights for callbacks, through the distributed session

Modules are imported by path; importing the package imports nothing (nor Keras).
"""
__all__ = []
