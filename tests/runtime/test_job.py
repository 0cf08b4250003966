"""Job, the entry behind AutoDist: which role a process has, and what needs a running job."""
import os

import pytest

from autodist.errors import LaunchError, SessionError
from autodist.runtime.context import ENV_VAR, JobContext
from autodist.runtime.job import Job, load_strategy
from autodist.spec.resource_spec import ResourceSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TWO_NODES = ResourceSpec(os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml"))
SERVERS = {"127.0.0.1": "127.0.0.1:1", "127.0.0.2": "127.0.0.2:2"}


def _context(tmp_path, address="127.0.0.2", **fields):
    return JobContext(job_id="j", address=address, servers=SERVERS, chief="127.0.0.1",
                      strategy_path=str(tmp_path / "s.pb"), **fields)


def test_a_process_without_a_job_is_the_chief_of_a_new_one():
    job = Job(TWO_NODES, environ={})
    assert job.is_chief and job.worker_index == 0 and job.num_workers == 2 and job.session is None


def test_a_launched_process_finds_its_place_in_the_environment(tmp_path):
    environ = _context(tmp_path).to_env()
    job = Job(TWO_NODES, environ=environ)
    assert not job.is_chief and job.worker_index == 1
    assert Job(TWO_NODES).is_chief                # no environment given: none is read
    given = _context(tmp_path, address="127.0.0.1")
    assert Job(TWO_NODES, context=given, environ=environ).is_chief   # an explicit context wins


def test_a_context_for_a_node_outside_the_spec_is_refused(tmp_path):
    context = JobContext(job_id="j", address="127.0.0.9", servers={"127.0.0.1": "a:1", "127.0.0.9": "b:2"},
                         chief="127.0.0.1", strategy_path=str(tmp_path / "s.pb"))
    with pytest.raises(LaunchError, match="node 127.0.0.9 of job j, which is not in"):
        Job(TWO_NODES, environ={ENV_VAR: context.to_env()[ENV_VAR]})


def test_reopen_needs_an_open_session():
    with pytest.raises(SessionError, match="create_distributed_session"):
        Job(TWO_NODES, environ={}).reopen(graph_item=None)


def test_finishing_a_job_this_process_did_not_launch_does_nothing(tmp_path):
    for job in (Job(TWO_NODES, environ={}), Job(TWO_NODES, context=_context(tmp_path))):
        job.finish()
        job.finish(abort=True, reason="test")
        job.chief_exiting(3)


def test_the_default_builder_is_ps_load_balancing_and_made_once():
    job = Job(TWO_NODES, environ={})
    assert type(job.strategy_builder).__name__ == "PSLoadBalancing"
    assert job.strategy_builder is job.strategy_builder


def test_a_member_waits_for_the_chiefs_strategy_a_bounded_time(tmp_path):
    context = _context(tmp_path, strategy_wait=0.3)
    with pytest.raises(LaunchError, match=r"node 127.0.0.2: the chief's strategy did not appear at .*s.pb"):
        load_strategy(context)


class _FakeProgress:
    made = []

    def __init__(self, sample, chief, total_steps):
        self.sample, self.chief, self.total_steps, self.stopped = sample, chief, total_steps, False
        _FakeProgress.made.append(self)

    def start(self):
        return self

    def stop(self):
        self.stopped = True


class _Handle:
    report = (7.0, {"steps": 3, "examples": 96})


class _Coordinator:
    def handles(self):
        return {("127.0.0.2", "worker"): _Handle(), ("127.0.0.2", "server"): _Handle()}


def test_the_chief_shows_progress_from_its_own_steps_and_the_other_nodes_reports(monkeypatch, tmp_path):
    import autodist.runtime.job as job_module
    monkeypatch.setattr(job_module, "Progress", _FakeProgress)
    _FakeProgress.made.clear()
    member = Job(TWO_NODES, context=_context(tmp_path), progress=True)
    monkeypatch.setattr(member, "_join", lambda item: "member session")
    assert member.open(None) == "member session" and _FakeProgress.made == []   # members never show it
    chief = Job(TWO_NODES, environ={}, progress=True, total_steps=50)
    monkeypatch.setattr(chief, "_start", lambda item: "chief session")
    assert chief.open(None) == "chief session"
    progress, = _FakeProgress.made
    assert progress.chief == "127.0.0.1" and progress.total_steps == 50
    chief._monitor.started()
    chief._monitor.finished(32)
    chief._coordinator = _Coordinator()
    samples = progress.sample()
    assert samples["127.0.0.2"] == _Handle.report and set(samples) == {"127.0.0.1", "127.0.0.2"}
    assert samples["127.0.0.1"][1]["steps"] == 1 and samples["127.0.0.1"][1]["examples"] == 32
    chief._coordinator = None
    chief.finish()
    assert progress.stopped


def test_no_progress_unless_asked(monkeypatch):
    import autodist.runtime.job as job_module
    monkeypatch.setattr(job_module, "Progress", _FakeProgress)
    _FakeProgress.made.clear()
    job = Job(TWO_NODES, environ={})
    monkeypatch.setattr(job, "_start", lambda item: "session")
    job.open(None)
    assert _FakeProgress.made == []


def test_a_launch_that_fails_preflight_leaves_no_staged_strategy(tmp_path, monkeypatch):
    from autodist.errors import PreflightError
    from autodist.runtime import job as job_module

    class Plan:
        def serialize(self, path):
            with open(path, "wb") as f:
                f.write(b"plan")
            return path

    def unfit(self, *args, **kwargs):
        raise PreflightError({"127.0.0.2": "python3 not found"})
    monkeypatch.setattr(job_module.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(job_module, "build_strategy", lambda item, spec, builder: Plan())
    monkeypatch.setattr(job_module.Coordinator, "launch", unfit)
    import tensorflow as tf
    from autodist.graph_item import GraphItem
    job = Job(TWO_NODES, environ={}, launch_argv=["train.py"])
    with pytest.raises(PreflightError):
        job.open(graph_item=GraphItem(tf.Graph()))   # staged: the plan and the graph's fingerprint
    job.finish(abort=True)
    assert os.listdir(str(tmp_path)) == []
