"""``tests/startup/sitecustomize.py``: the suite's processes skip Keras's optional imports, and only those."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
INSTALLED = sorted(name for name in ("sklearn", "matplotlib", "IPython") if importlib.util.find_spec(name))


@pytest.fixture
def finder():
    spec = importlib.util.spec_from_file_location("suite_sitecustomize", os.path.join(STARTUP, "sitecustomize.py"))
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.meta_path)
    try:
        spec.loader.exec_module(module)   # it puts its finder first on sys.meta_path: taken off again below
    finally:
        sys.meta_path[:] = saved
    return module.KerasOptionalImports()


def _find_from(module_name, finder, name):
    """``finder.find_spec(name)`` as an import statement in module ``module_name`` reaches it."""
    scope = {"__name__": module_name, "finder": finder, "name": name}
    exec("result = finder.find_spec(name)", scope)
    return scope["result"]


def test_only_an_import_made_by_keras_is_refused(finder, monkeypatch):
    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    with pytest.raises(ImportError, match="sklearn is not loaded for Keras"):
        _find_from("keras.src.wrappers.fixes", finder, "sklearn.base")
    assert _find_from("examples.digits_cnn", finder, "sklearn") is None   # anyone else: the next finder's
    assert _find_from("keras.src.models", finder, "numpy") is None        # another package: untouched
    monkeypatch.setitem(sys.modules, "sklearn", sys)                     # loaded already: Keras may use it
    assert _find_from("keras.src.wrappers.fixes", finder, "sklearn.base") is None


def test_a_process_the_suite_starts_has_tensorflow_without_them_and_a_script_gets_them(tmp_path):
    """The suite's environment (``conftest.py``) reaches a child: TensorFlow imports no optional package, the
    script's own import of each works, and a ``sitecustomize`` further on the path still runs."""
    if not INSTALLED:
        pytest.skip("none of scikit-learn, matplotlib, IPython is installed: nothing to skip")
    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_SITECUSTOMIZE_RAN'] = '1'\n")
    code = ("import json, os, sys, tensorflow\n"
            "before = sorted(n for n in {names!r} if n in sys.modules)\n"
            "for n in {names!r}: __import__(n)\n"
            "print(json.dumps([before, os.environ.get('SHADOWED_SITECUSTOMIZE_RAN')]))\n").format(names=INSTALLED)
    path = os.environ["PYTHONPATH"] + os.pathsep + str(tmp_path)
    assert path.split(os.pathsep)[0] == STARTUP
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [[], "1"]
