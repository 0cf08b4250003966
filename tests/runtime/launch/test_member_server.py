"""One process per node: a launched script hosts its node's server (runtime.launch.member_server, Coordinator)."""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from autodist.errors import RemoteWorkerError
from autodist.runner import new_job_id
from autodist.runner.frames import FrameSplitter
from autodist.runtime.context import JobContext
from autodist.runtime.launch.coordinator import Coordinator
from autodist.runtime.launch.server import READY
from autodist.spec.resource_spec import ResourceSpec
from test_coordinator import SPEC, Cluster


@pytest.fixture
def launch(tmp_path):
    made = []

    def start(fates=None, **options):
        cluster = Cluster(fates)
        coordinator = Coordinator(ResourceSpec.from_dict(SPEC), new_job_id(), runner_factory=cluster.factory,
                                  workdir_base=str(tmp_path), poll_interval=0.05, sink=open(os.devnull, "w"),
                                  log_base=str(tmp_path / "logs"), **options)
        strategy = tmp_path / "strategy.pb"
        strategy.write_bytes(b"plan")
        made.append(coordinator)
        context = coordinator.launch(str(strategy), ["/abs/train.py"], "/the/cwd")
        return coordinator, cluster, context
    yield start
    for coordinator in made:
        coordinator.abort()


def _ready(port):
    return None, "{} {}".format(READY, port)


SERVING = {("10.0.0.2", "worker"): _ready(5002), ("10.0.0.3", "worker"): _ready(5003)}


def test_serving_scripts_start_no_server_process_and_are_told_to_serve(launch):
    coordinator, cluster, context = launch(dict(SERVING))
    assert [h.argv[1:] for h in cluster.handles()] == [["/abs/train.py"]] * 2 and coordinator.handles().keys() == {
        ("10.0.0.2", "worker"), ("10.0.0.3", "worker")}
    for handle in cluster.handles():
        job = JobContext.from_env(handle.call.env)
        assert job.serves and not job.is_chief and job.servers == context.servers
    assert not context.serves, "the chief serves through serve_chief"


def test_a_script_that_ends_before_its_server_listens_fails_the_launch(launch):
    fates = {**SERVING, ("10.0.0.3", "worker"): (2, "usage: train.py")}
    with pytest.raises(RemoteWorkerError, match="training script exited with code 2 while starting its "
                                                "TensorFlow server") as info:
        launch(fates)
    assert info.value.host == "10.0.0.3" and "usage: train.py" in info.value.log_tail


def test_a_script_that_never_announces_its_server_fails_the_launch_in_bounded_time(launch):
    with pytest.raises(RemoteWorkerError, match="did not start its TensorFlow server within 1 s"):   # its bound
        launch({("10.0.0.2", "worker"): _ready(5002), ("10.0.0.3", "worker"): (None, "")}, ready_timeout=1.0)


def test_finish_takes_a_done_report_for_the_end_and_stops_the_serving_process(launch):
    coordinator, cluster, _ = launch(dict(SERVING))
    workers = cluster.handles()
    threading.Timer(0.2, workers[0].send_report, args=({"steps": 5, "busy": 0.0, "done": True},)).start()
    threading.Timer(0.2, workers[1].finish, args=(0,)).start()
    coordinator.finish(timeout=10)
    assert workers[0].terminated and not workers[1].terminated
    assert coordinator.failure() is None


SCRIPT = textwrap.dedent("""
    import json, sys
    from autodist.runtime.context import JobContext
    from autodist.runtime.launch.member_server import note_exit, serve
    from autodist.runtime.watch.step_report import StepMonitor
    context = JobContext(**json.loads(sys.argv[1]))
    monitor = StepMonitor()
    serve(context, 1, 1, monitor)
    serve(context, 1, 1, monitor)   # idempotent
    print("script ends", flush=True)
    if sys.argv[2] == "raise":
        raise ValueError("boom")
    if sys.argv[2] == "exit":
        note_exit(3)
        sys.exit(3)
""")


def _member(tmp_path, how):
    from autodist.runner import free_port
    servers = {"127.0.0.1": "localhost:{}".format(free_port()), "127.0.0.2": "localhost:{}".format(free_port())}
    context = JobContext(job_id="j", address="127.0.0.2", servers=servers, chief="127.0.0.1", strategy_path="",
                         serves=True)
    script = tmp_path / "member.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, str(script), json.dumps(dataclasses.asdict(context)), how],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env), context


def _read_until(process, predicate, timeout):
    """Output of ``process`` read until ``predicate(text, reports)`` holds (bounded); ``(text, reports)``."""
    os.set_blocking(process.stdout.fileno(), False)
    splitter, text, reports = FrameSplitter(), "", []
    deadline = time.monotonic() + timeout
    while not predicate(text, reports) and time.monotonic() < deadline and process.poll() is None:
        chunk = process.stdout.read()
        if chunk:
            plain, found = splitter.split(chunk.decode("utf-8", "replace"))
            text, reports = text + plain, reports + found
        time.sleep(0.05)
    return text, reports


def test_a_normal_end_reports_done_and_keeps_serving_until_stopped(tmp_path):
    process, context = _member(tmp_path, "end")
    try:
        text, reports = _read_until(process, lambda text, reports: any(r.get("done") for r in reports), 60)
        assert text.count(READY) == 1 and "{} {}".format(READY, context.servers["127.0.0.2"].rsplit(":")[1]) in text
        assert "script ends" in text and any(r.get("done") for r in reports)
        time.sleep(0.5)
        assert process.poll() is None, "the process still serves its node"
    finally:
        process.terminate()
        process.wait(20)


@pytest.mark.parametrize("how, status", [("raise", 1), ("exit", 3)])
def test_a_failing_script_leaves_at_once_with_its_status(tmp_path, how, status):
    process, _ = _member(tmp_path, how)
    try:
        assert process.wait(60) == status
        text, reports = FrameSplitter().split(process.stdout.read().decode("utf-8", "replace"))
        assert READY in text and not any(r.get("done") for r in reports)
    finally:
        if process.poll() is None:
            process.kill()
