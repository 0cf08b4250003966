"""Shrinking at a relaunch (``runtime.recovery.shrink``) with stand-in runners: which nodes are left out, when not."""
import pytest

from autodist.errors import LaunchError, PreflightError
from autodist.runner import LocalRunner
from autodist.runtime.context import JobContext
from autodist.runtime.job import Job
from autodist.runtime.recovery.shrink import leave_out_unreachable, plan_change, restricted
from autodist.spec.resource_spec import ResourceSpec

THREE = """nodes:
  - address: 127.0.0.1
    chief: true
  - address: 127.0.0.2
  - address: 127.0.0.3
    ssh_config: far
ssh:
  far:
    port: 2222
"""


class GoneRunner:
    """A node whose SSH connection is refused."""
    python_venv = None

    def __init__(self, name):
        self.name = name
        self.closed = False

    def connect(self):
        raise LaunchError("{}: cannot connect over SSH: Connection refused".format(self.name))

    def close(self):
        self.closed = True


def _factory(made):
    def make(node, spec, sink=None):
        runner = GoneRunner(node.address) if spec.ssh_config_map[node.address] else LocalRunner(node.address)
        made.append(runner)
        return runner
    return make


def test_nodes_failing_preflight_are_left_out_while_enough_remain():
    spec, said, made = ResourceSpec.from_string(THREE), [], []
    smaller, failures = leave_out_unreachable(spec, 2, said.append, runner_factory=_factory(made))
    assert [n.address for n in smaller.node_specs] == ["127.0.0.1", "127.0.0.2"]
    assert smaller.remote_nodes == [] and smaller.chief == "127.0.0.1"
    assert list(failures) == ["127.0.0.3"] and "Connection refused" in failures["127.0.0.3"]
    assert said == ["leaving out 127.0.0.3 (127.0.0.3: cannot connect over SSH: Connection refused): "
                    "2 of 3 nodes remain (min_nodes 2)"]
    assert all(r.closed for r in made if isinstance(r, GoneRunner))


def test_fewer_than_min_nodes_left_is_a_preflight_error_naming_each_problem():
    with pytest.raises(PreflightError) as caught:
        leave_out_unreachable(ResourceSpec.from_string(THREE), 3, print, runner_factory=_factory([]))
    assert set(caught.value.failures) == {"127.0.0.3", "(min_nodes)"}
    assert "only 2 of 3 node(s) pass, 3 needed" in str(caught.value)


def test_a_fit_cluster_is_kept_as_it_is():
    spec = ResourceSpec.from_string(THREE.replace("    ssh_config: far\n", "").split("ssh:")[0])
    assert leave_out_unreachable(spec, 1, print, runner_factory=_factory([])) == (spec, {})
    assert restricted(spec, ["127.0.0.1", "127.0.0.2", "127.0.0.3"]) is spec


def test_the_plan_change_names_nodes_builder_and_replicas():
    full = ResourceSpec.from_string(THREE)
    line = plan_change(full, restricted(full, ["127.0.0.1"]), type("AllReduce", (), {})(), 3, 1)
    assert line == "plan change: nodes 127.0.0.1, 127.0.0.2, 127.0.0.3 -> 127.0.0.1; builder AllReduce; replicas 3 -> 1"


def test_a_launched_node_sees_only_the_nodes_of_its_job():
    context = JobContext(job_id="j", address="127.0.0.2", servers={"127.0.0.1": "a:1", "127.0.0.2": "b:2"},
                         chief="127.0.0.1", strategy_path="/s")
    job = Job(ResourceSpec.from_string(THREE), context=context)
    assert [n.address for n in job.resource_spec.node_specs] == ["127.0.0.1", "127.0.0.2"]
    assert (job.num_workers, job.worker_index, job.attempt) == (2, 1, None)


def test_a_relaunch_preflights_through_the_jobs_launcher(monkeypatch):
    """Under the srun launcher the relaunch's preflight starts srun steps, not SSH sessions."""
    import autodist.runtime.launch.node as node_launch
    made = []
    monkeypatch.setattr(node_launch, "srun_runner", _factory(made))
    monkeypatch.setattr(node_launch, "default_runner", lambda *a, **k: pytest.fail("SSH used under srun"))
    job = Job(ResourceSpec.from_string(THREE), min_nodes=1, launcher="srun",
              environ={"AUTODIST_ATTEMPT": "2", "SLURM_JOB_NODELIST": "127.0.0.[1-3]"})
    assert [n.address for n in job.resource_spec.node_specs] == ["127.0.0.1", "127.0.0.2"]
    assert sorted(r.name for r in made) == ["127.0.0.2", "127.0.0.3"]
