"""Two jobs at once on one host: their own ids, ports, directories and numbers."""
import os
import re

import numpy as np
import pytest

from jobtools import REPO, SCRIPTS, assert_only_logs_left, job_processes, linear_reference

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
SCRIPT = os.path.join(SCRIPTS, "job_linear.py")
STEPS = 4


def check_numbers(chief, seed, steps=STEPS):
    """Every node's losses and final weights equal single-device training on the whole batch."""
    results = sorted(chief.results().values(), key=lambda r: r["index"])
    assert len(results) == 2, chief.output()[-4000:]
    losses, w = linear_reference(seed=seed, steps=steps)
    for step in range(steps):
        np.testing.assert_allclose([v for r in results for v in r["losses"][step]], losses[step],
                                   rtol=1e-5, atol=1e-6)
    for r in results:
        np.testing.assert_allclose(r["w"], w, rtol=1e-5, atol=1e-6)


def test_two_jobs_at_once_on_one_host_each_train_their_own_numbers(chiefs):
    jobs = {seed: chiefs([SCRIPT, LOOPBACK, "--seed", str(seed), "--steps", str(STEPS), "--sleep", "0.3"])
            for seed in (1, 2)}
    lines = {}
    for seed, chief in jobs.items():
        lines[seed] = chief.wait_for(r"\[autodist\] job ", 120)[1].string
    # Both are up at the same time before either is done.
    for chief in jobs.values():
        chief.wait_for(r"\[127\.0\.0\.2\] STEP 0$", 120)
    assert all(chief.proc.poll() is None for chief in jobs.values())
    ids = {chief.job_id for chief in jobs.values()}
    ports = [set(re.findall(r":(\d+)", line.split("servers ")[1].split(",")[0])) for line in lines.values()]
    assert len(ids) == 2 and not ports[0] & ports[1]
    for seed, chief in jobs.items():
        assert chief.wait(150) == 0, chief.output()[-4000:]
        check_numbers(chief, seed)
        assert job_processes(chief.job_id) == []
        assert_only_logs_left(chief.job_id)
