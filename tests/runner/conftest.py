"""Fixtures of the runner tests: process-group inspection.

The loopback ``sshd`` and ``venv_prefix`` fixtures are shared by every test
directory and live in ``tests/conftest.py``.
"""
import subprocess
import time

import pytest


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
