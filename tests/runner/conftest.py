"""Fixtures of the runner tests: a loopback sshd and process-group inspection.

The sshd (see ``sshd.py``) is started once per session and stopped at the
end; without ``/usr/sbin/sshd`` every test that uses it is skipped.
"""
import os
import subprocess
import sys
import time

import pytest

import sshd as loopback_sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    reason = loopback_sshd.missing_reason()
    if reason:
        pytest.skip(reason)
    server = loopback_sshd.start_sshd(str(tmp_path_factory.mktemp("sshd")))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def venv_prefix():
    """A ``python_venv`` prefix that puts this interpreter's directory first on PATH.

    The sshd's login environment has the system PATH only; this is how a user
    would point a node at the interpreter that has autodist and TensorFlow.
    """
    return 'export PATH={}:"$PATH"'.format(os.path.dirname(sys.executable))


def live_group_pids(pgid):
    """Pids of non-zombie processes in process group ``pgid``, read with ``ps``."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True,
                         timeout=10, check=True).stdout
    return [int(pid) for pid, group, stat in (line.split() for line in out.splitlines())
            if int(group) == pgid and not stat.startswith(("Z", "X"))]


def wait_for(predicate, timeout=10.0, interval=0.05):
    """Poll until ``predicate()`` is truthy or ``timeout`` s pass; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture
def group_pids():
    return live_group_pids


@pytest.fixture
def poll_until():
    return wait_for
