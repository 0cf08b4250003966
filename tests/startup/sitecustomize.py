"""Processes the suite starts skip Keras's optional integrations: a third of each one's start-up.

TensorFlow 2.21 imports Keras eagerly, and Keras imports scikit-learn (and
with it SciPy), matplotlib's pyplot and IPython whenever they are installed, to
offer its scikit-learn wrappers, image plots and notebook hooks. No test uses
those, and the test extra installs scikit-learn and matplotlib for the
examples and the benchmarks' plots. Measured here: ``import tensorflow`` takes
4.3 CPU-seconds with them and 2.8 without, and the multi-process tiers start
TensorFlow in every chief, node, example and restart they run.

``tests/conftest.py`` puts this directory first on ``PYTHONPATH``, so every
Python process the suite starts with the suite's environment runs this. An
import of one of these packages *made by a module of Keras* is refused with
ImportError, which Keras takes as "not installed"; the same import from
anywhere else (an example's ``from sklearn.datasets import load_digits``, a
benchmark's plot) loads the package as usual, and so does Keras's once the
package is loaded. autodist never imports them: nothing it runs is skipped.

A ``sitecustomize`` this one shadows (a distribution's) still runs, after it.
"""
import importlib.machinery
import importlib.util
import os
import sys

OPTIONAL = frozenset({"sklearn", "matplotlib", "IPython"})
_HERE = os.path.dirname(os.path.abspath(__file__))


class KerasOptionalImports:
    """A meta path finder that refuses OPTIONAL packages to Keras's own modules, and finds nothing itself."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in OPTIONAL and top not in sys.modules and _importer().startswith("keras."):
            raise ImportError("{} is not loaded for Keras in the test suite's processes "
                              "(tests/startup/sitecustomize.py)".format(top), name=name)
        return None


def _importer():
    """The module whose ``import`` statement is running: the first frame outside the import machinery."""
    frame = sys._getframe(2)
    for _ in range(64):   # the machinery is a handful of frames deep
        if frame is None:
            return ""
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("importlib", "_frozen_importlib")):
            return module
        frame = frame.f_back
    return ""


def _run_shadowed():
    """Run the ``sitecustomize`` that this one hides on ``sys.path``, if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


sys.meta_path.insert(0, KerasOptionalImports())
_run_shadowed()
