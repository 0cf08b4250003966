"""Shared test set-up.

TensorFlow's C++ logging is silenced for readable test output; this is the
test harness's choice, never the package's (importing autodist reads no
environment). So is ``startup/sitecustomize.py`` on every started process's
``PYTHONPATH``: Keras's optional integrations are not loaded.

The loopback ``sshd`` (see ``sshd_fixture.py``) is started once per session,
on first use, and stopped at the end; without ``/usr/sbin/sshd`` every test
that uses it is skipped (the ``ssh`` tier: it fails instead where
``AUTODIST_REQUIRE`` names it, see ``tiers.py``).

The tests of Ctrl-C send SIGINT and expect Python's KeyboardInterrupt, here
and in the processes they start. A shell without job control starts a
background command (``bash scripts/test.sh &`` in a script) with SIGINT
ignored, which every child inherits; the suite restores Python's handler so
that it runs the same in the foreground and in the background.
"""
import os
import signal
import subprocess
import sys

import pytest

import sharding
import sshd_fixture
import tiers

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# every Python process the suite starts skips Keras's optional scikit-learn, matplotlib and IPython hooks, a
# third of its start-up (startup/sitecustomize.py)
STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [STARTUP] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != STARTUP])
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):
    tiers.required()   # an unknown tier in AUTODIST_REQUIRE stops the run here, naming it


@pytest.hookimpl(tryfirst=True)   # before xdist's own, which turns the groups into the tests' scheduling scopes
def pytest_collection_modifyitems(config, items):
    """Tests that share a costly resource run on one worker under ``pytest -n`` (``sharding.py``)."""
    for item in items:
        group = sharding.group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):   # an xdist worker, whose collection the controller schedules: costliest first
        items[:] = sharding.scheduled_first(items, sharding.load_durations())


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    reason = sshd_fixture.missing_reason()
    if reason:
        tiers.unavailable("ssh", reason)
    server = sshd_fixture.start_sshd(str(tmp_path_factory.mktemp("sshd")))
    yield server
    server.stop()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A directory on a fresh 200 KiB tmpfs: a file system that fills up. Unmounted afterwards, also on failure.

    Mounting needs root (CI runs the suite as root); elsewhere the test is
    skipped with the reason (the ``tmpfs`` tier: see ``tiers.py``).
    """
    if os.geteuid() != 0:
        tiers.unavailable("tmpfs", "mounting a small tmpfs (a disk that fills up) needs root; CI runs this as root")
    target = tmp_path / "small_tmpfs"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k,mode=0755", "tmpfs", str(target)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        tiers.unavailable("tmpfs", "cannot mount a tmpfs here: {}".format(mounted.stderr.strip() or mounted.returncode))
    try:
        yield target
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def spec(tmp_path_factory):
    """A resource spec of one node with two CPU replicas (modules may define their own ``spec``)."""
    path = tmp_path_factory.mktemp("spec") / "two_cpus.yml"
    path.write_text("nodes:\n  - address: 127.0.0.1\n    cpus: [0, 1]\n")
    return str(path)


@pytest.fixture(scope="session")
def venv_prefix():
    """A ``python_venv`` prefix that puts this interpreter's directory first on PATH.

    The sshd's login environment has the system PATH only; this is how a user
    would point a node at the interpreter that has autodist and TensorFlow.
    """
    return 'export PATH={}:"$PATH"'.format(os.path.dirname(sys.executable))
