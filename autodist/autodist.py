"""``autodist.autodist``: AutoDist 0.7's import path, no logic of its own (``api.AutoDist``, ``context.chief_flags``).

AutoDist 0.7's module of the ``AutoDist`` class and of ``IS_AUTODIST_CHIEF``.

AutoDist's save/restore guide guards chief-only work with it::

    from autodist.autodist import IS_AUTODIST_CHIEF
    if IS_AUTODIST_CHIEF:
        builder.save()

What it means, as in AutoDist: ``IS_AUTODIST_CHIEF`` is True in the process
the user started (the chief of the job it creates) and False in the copies of
the script that the chief launched on the other nodes; ``IS_AUTODIST_WORKER``
is its negation. It is known before any ``AutoDist`` exists, so a script can
use it at its top. It is read from the job environment (``AUTODIST_JOB``,
``autodist.runtime.context``) when it is looked up, never when ``autodist``
is imported. A process attached to servers started by something else
(``AutoDist(..., job=...)``) has no such environment: there, ask the object
(``ad.is_chief``), which knows its job.

``AutoDist`` is ``autodist.api.AutoDist``; it is loaded on first use, so
importing this module does not import TensorFlow.
"""
import importlib
import os

from autodist.runtime.context import chief_flags

__all__ = ["AutoDist", "IS_AUTODIST_CHIEF", "IS_AUTODIST_WORKER"]


def __getattr__(name):   # names looked up when asked: the flags then read the environment, AutoDist loads TensorFlow
    if name == "AutoDist":
        return importlib.import_module("autodist.api").AutoDist
    flags = chief_flags(os.environ)
    if name in flags:
        return flags[name]
    raise AttributeError("module {!r} has no attribute {!r}".format(__name__, name))


def __dir__():
    return sorted(set(globals()) | set(__all__))
