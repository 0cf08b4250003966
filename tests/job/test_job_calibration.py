"""Every node of a job plans AutoStrategy with the chief's calibration, shipped with the job (issue 14)."""
import dataclasses
import json
import os

import pytest

from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies.cost import prior_calibration, save_calibration
from autodist.strategies.cost.calibration import PROBE_VERSION
from jobtools import REPO, SCRIPTS

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
SCRIPT = os.path.join(SCRIPTS, "job_calibration.py")

pytestmark = pytest.mark.slow


def _calibration(**changes):
    return dataclasses.replace(prior_calibration(ResourceSpec(LOOPBACK)), source="probe",
                               probe_version=PROBE_VERSION, **changes)


def test_the_other_node_plans_with_the_chiefs_calibration_not_its_own(chiefs, tmp_path):
    # The chief's cluster: rings are cheap, parameter servers dear; the other node's cache says the opposite.
    chief_cache = _calibration(collective_bandwidth=1e12, collective_latency_s=1e-7, round_trip_s=0.0, ps_step_s=0.5,
                               rpc_latency_s=0.1, rpc_bandwidth=1e3)
    member_cache = _calibration(collective_bandwidth=1e3, collective_latency_s=0.1, round_trip_s=0.5, ps_step_s=0.0,
                                rpc_latency_s=1e-7, rpc_bandwidth=1e12)
    save_calibration(ResourceSpec(LOOPBACK), chief_cache, str(tmp_path / ".autodist" / "calibration"))
    chief = chiefs([SCRIPT, LOOPBACK, json.dumps(member_cache.to_dict())], env={"HOME": str(tmp_path)})
    assert chief.wait(180) == 0, chief.output()[-4000:]
    results = chief.results()
    mine, other = results[None], results["127.0.0.2"]
    assert mine["job"][0] == "AllReduce" and other["own"][0] != "AllReduce", results   # the caches disagree
    assert other["job"] == mine["job"]
