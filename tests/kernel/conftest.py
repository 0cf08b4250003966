"""Fixtures of the kernel tests: in-process TensorFlow servers shared by the whole test session.

``cluster(num_tasks)`` returns the shared cluster of that many tasks (two CPU
devices each), started on first use; the nodes a test opens are closed and
their job's resources dropped when the test ends.
"""
import pytest

from kernel_harness import InProcessCluster


@pytest.fixture(scope="session")
def _clusters():
    return {}


@pytest.fixture
def cluster(_clusters):
    used = []

    def get(num_tasks=1):
        if num_tasks not in _clusters:
            _clusters[num_tasks] = InProcessCluster(num_tasks, cpus=2)
        used.append(_clusters[num_tasks])
        return _clusters[num_tasks]
    yield get
    for c in used:
        c.close_all()
