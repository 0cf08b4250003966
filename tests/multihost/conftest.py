"""Fixtures of the multi-host tier: emulated clusters (``autodist cluster``), shared per module, and chiefs.

Every cluster a module made is removed at the module's end, also after a
failure, and the tier checks that nothing of it is left (namespaces, links,
processes, files, looked up by the cluster's name). Without root or network
namespaces every test here is skipped with the reason (the ``cluster`` tier:
it fails instead where ``AUTODIST_REQUIRE`` names it, see ``tests/tiers.py``).
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "job"))

import tiers  # noqa: E402
from clustertools import Cluster, cannot_make_reason  # noqa: E402
from jobtools import Chief, job_processes  # noqa: E402


@pytest.fixture(scope="module")
def make_cluster(tmp_path_factory):
    """``make(nodes, rate="1gbit", *flags) -> Cluster`` (up; ``flags``: ``--slurm``, ``--mpi``); every one is
    brought down at the module's end."""
    reason = cannot_make_reason()
    if reason:
        tiers.unavailable("cluster", reason)
    made = []

    def make(nodes, rate="1gbit", *flags):
        cluster = Cluster(nodes, rate, tmp_path_factory.mktemp("cluster"), flags)
        made.append(cluster)
        return cluster.up()
    yield make
    problems = []
    for cluster in made:
        cluster.down()
        problems += cluster.leftovers()
    assert not problems, problems


@pytest.fixture
def chiefs():
    """``start(argv, **kwargs) -> Chief``; every chief and every job it started is killed (by pid) at the end."""
    started = []

    def start(argv, **kwargs):
        started.append(Chief(argv, **kwargs))
        return started[-1]
    yield start
    for chief in started:
        chief.cleanup()
        for job_id in set(chief_job_ids(chief)):
            for pid in job_processes(job_id):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass


def chief_job_ids(chief):
    import re
    return re.findall(r"\[autodist\] job (\S+): \d+ nodes", chief.output())
