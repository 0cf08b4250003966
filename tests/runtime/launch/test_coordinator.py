"""Coordinator with recording runners: launch order, failures, teardown, signals (no real processes)."""
import json
import os
import signal
import threading
import time

import pytest

from autodist.runtime.launch.coordinator import Coordinator, describe_exit
from autodist.errors import PreflightError, RemoteWorkerError
from autodist.runtime.context import JobContext
from autodist.spec.resource_spec import ResourceSpec
from autodist.runner import LocalRunner, new_job_id
from autodist.runner.console import NodeConsole
from recording_runner import RecordingRunner
from autodist.runner.base import wait_until
from autodist.runner.preflight import VERSIONS_MARKER, local_versions
from autodist.runtime.launch.server import READY

SPEC = {"nodes": [{"address": "10.0.0.1", "chief": True},
                  {"address": "10.0.0.2", "ssh_config": "g"},
                  {"address": "10.0.0.3", "ssh_config": "g"}],
        "ssh": {"g": {"username": "u"}}}


class Cluster:
    """Recording runners for the non-chief nodes (a local runner for the chief) and their scripted fates."""

    last = None   # the newest cluster, for tests whose launch raises

    def __init__(self, fates=None):
        self.fates = fates or {}     # (address, kind) -> (exit code or None, output); kind "preflight" or "worker"
        self.runners = {}
        Cluster.last = self

    def behaviour(self, address):
        versions = json.dumps(dict(local_versions(), python="3"))
        port = str(5000 + int(address.rsplit(".", 1)[1]))

        def decide(call):
            text = " ".join(call.argv)
            if VERSIONS_MARKER in text:
                kind = "preflight"
            elif "socket" in text:
                return 0, port
            elif "makedirs" in text:
                return 0, ""
            else:
                kind = "worker"
            default = {"preflight": (0, "{} {}".format(VERSIONS_MARKER, versions)),
                       "worker": (None, "{} {}".format(READY, port))}[kind]   # the script's server listens
            return self.fates.get((address, kind), default)
        return decide

    def factory(self, node, spec, sink=None):
        if node.chief:
            return LocalRunner(node.address, sink=sink)
        runner = RecordingRunner(node.address, self.behaviour(node.address), sink=sink)
        self.runners[node.address] = runner
        return runner

    def handles(self):
        """The nodes' scripts (each hosts its node's server); not the helpers (preflight, ports, directories)."""
        return [h for r in self.runners.values() for h in r.handles if "-c" not in h.argv]


@pytest.fixture
def launch(tmp_path):
    made = []

    def start(fates=None, **options):
        cluster = Cluster(fates)
        options.setdefault("poll_interval", 0.05)
        options.setdefault("sink", open(os.devnull, "w"))
        options.setdefault("log_base", str(tmp_path / "logs"))
        coordinator = Coordinator(ResourceSpec.from_dict(SPEC), new_job_id(), runner_factory=cluster.factory,
                                  workdir_base=str(tmp_path), **options)
        strategy = tmp_path / "strategy.pb"
        strategy.write_bytes(b"plan")
        made.append(coordinator)
        context = coordinator.launch(str(strategy), ["/abs/train.py", "--x", "1"], "/the/cwd")
        return coordinator, cluster, context
    yield start
    for coordinator in made:
        coordinator.abort()


def test_launch_checks_hosts_first_then_starts_the_scripts_which_serve(launch, tmp_path):
    coordinator, cluster, context = launch()
    assert context.is_chief and context.address == "10.0.0.1"
    assert context.servers["10.0.0.2"] == "10.0.0.2:5002"
    for address, runner in cluster.runners.items():
        texts = [" ".join(c.argv) for c in runner.calls]
        assert VERSIONS_MARKER in texts[0]                      # preflight before anything else
        worker = runner.calls[-1]
        assert worker.argv[1:] == ["/abs/train.py", "--x", "1"] and worker.cwd == "/the/cwd"
        assert [c for c in runner.calls if "-c" not in c.argv] == [worker]   # one process per node
        job = JobContext.from_env(worker.env)
        assert job.address == address and job.job_id == coordinator.job_id and not job.is_chief
        assert job.serves                                       # the script hosts its node's server
        assert runner.copies == [(str(tmp_path / "strategy.pb"), coordinator.workdir + "/strategy.pb")]
    chief_dir = os.path.join(str(tmp_path), "job-" + coordinator.job_id)
    assert oct(os.stat(chief_dir).st_mode & 0o777) == "0o700"
    assert coordinator.failure() is None


def test_failing_preflight_starts_nothing_and_names_every_host(launch, tmp_path):
    fates = {("10.0.0.2", "preflight"): (1, "ModuleNotFoundError: No module named 'autodist'"),
             ("10.0.0.3", "preflight"): (127, "sh: python3: not found")}
    with pytest.raises(PreflightError) as info:
        launch(fates)
    assert set(info.value.failures) == {"10.0.0.2", "10.0.0.3"}
    assert "No module named 'autodist'" in info.value.failures["10.0.0.2"]
    assert "python3 not found" in info.value.failures["10.0.0.3"]
    assert not [p for p in os.listdir(str(tmp_path)) if p.startswith("job-")]


def test_a_failing_script_stops_the_job_and_names_host_code_and_log(launch):
    coordinator, cluster, _ = launch()
    worker = cluster.handles()[0]
    worker.finish(3, "step 7\nValueError: boom")
    error = _wait_failure(coordinator)
    assert isinstance(error, RemoteWorkerError)
    assert error.host == worker.name and error.exit_code == 3 and "ValueError: boom" in error.log_tail
    assert "training script exited with code 3" in str(error)
    others = [h for h in cluster.handles() if h is not worker]
    # The failure is published first, then the others are stopped (by the watch thread).
    assert wait_until(lambda: all(h.terminated for h in others), 5.0)


def test_the_last_lines_of_a_failure_are_the_nodes_own_without_the_ready_handshake(launch, tmp_path):
    """Issue 33, item 12: the server's internal ready line (and TensorFlow's chatter) stay in the log only."""
    coordinator, cluster, _ = launch(sink=NodeConsole(stream=open(os.devnull, "w"), hidden=(READY,)))
    worker = cluster.handles()[0]
    worker.finish(1, "I0000 00:00:1795547531.316711   10739 port.cc:153] oneDNN custom operations are on.\n"
                     "OSError: [Errno 98] Address already in use")
    error = _wait_failure(coordinator)
    assert error.log_tail == "OSError: [Errno 98] Address already in use"
    assert READY not in str(error) and "oneDNN" not in str(error)
    log = open(coordinator.logs.file(worker.name, "worker")).read()
    assert log.startswith("{} 50".format(READY)) and "oneDNN" in log


def test_a_dropped_connection_is_a_failure(launch):
    coordinator, cluster, _ = launch()
    cluster.handles()[1].drop_connection()
    error = _wait_failure(coordinator)
    assert "connection to it was lost while its training script ran" in str(error)


def test_a_script_whose_server_dies_while_starting_fails_the_launch(launch):
    with pytest.raises(RemoteWorkerError, match=r"training script exited with code 1 while starting its "
                                                r"TensorFlow server"):
        launch({("10.0.0.3", "worker"): (1, "Could not start gRPC server")})


def test_finish_waits_for_scripts_and_removes_directories(launch, tmp_path):
    coordinator, cluster, _ = launch()
    for worker in cluster.handles():
        threading.Timer(0.2, worker.finish, args=(0,)).start()
    coordinator.finish(timeout=10)
    assert not any(h.terminated for h in cluster.handles())
    for runner in cluster.runners.values():
        assert runner.removed == [coordinator.workdir] and runner.closed
    assert not os.path.exists(os.path.join(str(tmp_path), "job-" + coordinator.job_id))
    coordinator.abort()   # idempotent


def test_each_launched_process_logs_everything_into_a_private_directory_that_outlives_the_job(launch, tmp_path):
    coordinator, cluster, _ = launch()
    cluster.handles()[0].emit("step 1 loss 0.5\n")
    for worker in cluster.handles():
        worker.finish(0)
    coordinator.finish(timeout=10)
    logs = os.path.join(str(tmp_path), "logs", "job-" + coordinator.job_id)
    assert coordinator.logs.path == logs
    assert oct(os.stat(logs).st_mode & 0o777) == "0o700"
    assert sorted(os.listdir(logs)) == ["10.0.0.{}-worker.log".format(n) for n in (2, 3)]
    log = open(os.path.join(logs, "10.0.0.2-worker.log")).read()
    assert log.startswith("{} 5002\n".format(READY)) and "step 1 loss 0.5" in log
    # nothing else of the job is left: the job directory is gone, the log base holds only this job's logs
    assert sorted(os.listdir(str(tmp_path))) == ["logs", "strategy.pb"]
    assert os.listdir(os.path.join(str(tmp_path), "logs")) == ["job-" + coordinator.job_id]


def test_only_the_newest_job_logs_are_kept(launch, tmp_path):
    base = tmp_path / "logs"
    for age in range(25):
        old = base / "job-20200101-0000{:02d}-0000abcd".format(age)
        old.mkdir(parents=True)
        os.utime(str(old), (1e9 + age, 1e9 + age))
    (base / "notes.txt").write_text("not ours")
    coordinator, _, _ = launch()
    kept = sorted(os.listdir(str(base)))
    assert len(kept) == 21 and "notes.txt" in kept and "job-" + coordinator.job_id in kept
    assert "job-20200101-000024-0000abcd" in kept and "job-20200101-000005-0000abcd" not in kept


def test_the_default_console_shows_node_lines_but_not_the_servers_handshake_or_chatter(launch, capsys):
    coordinator, cluster, _ = launch(sink=None)
    worker = cluster.handles()[0]
    worker.emit("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
                "step 1 loss 0.5\n")
    assert wait_until(lambda: "step 1 loss 0.5" in worker.tail(5), 5.0)
    out = capsys.readouterr().out
    assert "[{}] step 1 loss 0.5".format(worker.name) in out and "node logs in " + coordinator.logs.path in out
    assert READY not in out and "absl" not in out


def test_finish_fails_a_script_that_does_not_end(launch):
    coordinator, cluster, _ = launch()
    with pytest.raises(RemoteWorkerError, match="still running"):
        coordinator.finish(timeout=0.3)
    assert all(h.terminated for h in cluster.handles())


def test_a_chief_busy_outside_the_session_gets_the_failure_raised(launch):
    before = signal.getsignal(signal.SIGINT)
    coordinator, cluster, _ = launch(interrupt_after=0.2)
    cluster.handles()[1].finish(137, "Killed")
    with pytest.raises(RemoteWorkerError, match="killed by SIGKILL"):
        time.sleep(10)              # nobody asks failure(): the main thread is interrupted
    coordinator.abort()
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_to_the_chief_stops_the_job(launch):
    before = signal.getsignal(signal.SIGTERM)
    coordinator, cluster, _ = launch()
    with pytest.raises(SystemExit) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    assert info.value.code == 143
    assert all(h.terminated for h in cluster.handles())
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("code, text", [
    (0, "exited with code 0"), (1, "exited with code 1"), (137, "exited with code 137 (killed by SIGKILL)"),
    (143, "exited with code 143 (killed by SIGTERM)"), (255, "exited with code 255"),
])
def test_describe_exit(code, text):
    assert describe_exit(code) == text


def _wait_failure(coordinator, timeout=5.0):
    deadline = time.monotonic() + timeout
    while coordinator.failure() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert coordinator.failure() is not None
    return coordinator.failure()


def test_a_second_sigterm_while_the_job_stops_does_not_cut_the_stop_short(launch, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    said = tmp_path / "said.txt"
    sink = open(said, "w")
    coordinator, cluster, _ = launch(sink=sink)
    worker = cluster.handles()[0]
    worker.stopping = threading.Event()      # its stop takes until we release it
    threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGTERM)).start()   # the second signal
    threading.Timer(1.0, worker.stopping.set).start()
    with pytest.raises(SystemExit) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
    assert info.value.code == 143
    assert all(h.terminated for h in cluster.handles())
    assert all(r.removed == [coordinator.workdir] for r in cluster.runners.values())
    sink.flush()
    text = said.read_text()
    assert "terminated (SIGTERM); stopping every process of the job" in text
    assert "SIGTERM received while stopping the job; still stopping it" in text
    assert signal.getsignal(signal.SIGTERM) is before


def test_finish_stops_nodes_that_wait_for_a_chief_whose_script_ended(launch, tmp_path, monkeypatch):
    monkeypatch.setattr("autodist.runtime.watch.step_report.WAIT_FOR_CHIEF", 0.3)
    said = tmp_path / "said.txt"
    sink = open(said, "w")
    coordinator, cluster, _ = launch(sink=sink)
    workers = cluster.handles()
    stop = threading.Event()

    def report_stuck():   # each node sits in its call 8 of a few ms, reporting once every 0.1 s
        busy = 0.0
        while not stop.wait(0.1):
            busy += 0.1
            for worker in workers:
                worker.send_report({"steps": 7, "busy": busy, "step_s": 0.004})
    reporter = threading.Thread(target=report_stuck, daemon=True)
    reporter.start()
    coordinator.finish(timeout=60)   # no failure (the nodes did nothing wrong), and not its timeout's (that is one)
    stop.set()
    assert all(h.terminated for h in workers)
    sink.flush()
    text = said.read_text()
    assert "the chief's script has ended while 10.0.0.2 and 10.0.0.3 still wait for it" in text
    assert "10.0.0.2: session call 8 running for" in text


def test_finish_waits_for_a_node_that_is_busy_outside_the_session(launch, monkeypatch):
    monkeypatch.setattr("autodist.runtime.watch.step_report.WAIT_FOR_CHIEF", 0.2)
    coordinator, cluster, _ = launch()
    workers = cluster.handles()
    for worker in workers:   # idle between calls (evaluating, writing files): not waiting for the chief
        worker.send_report({"steps": 12, "busy": 0.0, "step_s": 0.004})
        threading.Timer(1.0, worker.finish, args=(0,)).start()
    coordinator.finish(timeout=30)
    assert not any(h.terminated for h in workers)


def test_a_verbose_console_shows_every_line(launch, capsys):
    coordinator, cluster, _ = launch(sink=None, verbose=True)
    worker = cluster.handles()[0]
    worker.emit("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
    assert wait_until(lambda: "absl" in worker.tail(5), 5.0)
    out = capsys.readouterr().out
    assert "{} 5002".format(READY) in out and "[{}] WARNING: All log messages".format(worker.name) in out


def test_the_directories_above_a_new_job_directory_are_made_private_too(tmp_path):
    cluster = Cluster()
    base = tmp_path / "home" / ".autodist" / "jobs"
    (tmp_path / "home").mkdir(mode=0o755)
    coordinator = Coordinator(ResourceSpec.from_dict(SPEC), new_job_id(), runner_factory=cluster.factory,
                              workdir_base=str(base), poll_interval=0.05, sink=open(os.devnull, "w"))
    strategy = tmp_path / "strategy.pb"
    strategy.write_bytes(b"plan")
    try:
        coordinator.launch(str(strategy), ["/abs/train.py"], "/the/cwd")
        for path in (base.parent, base, base / ("job-" + coordinator.job_id)):
            assert oct(os.stat(path).st_mode & 0o777) == "0o700", path
        assert oct(os.stat(tmp_path / "home").st_mode & 0o777) == "0o755"   # it existed: left alone
    finally:
        coordinator.abort()


@pytest.mark.parametrize("signum, raised", [(signal.SIGTERM, SystemExit), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_while_launching_stops_the_launch_and_leaves_nothing(launch, tmp_path, signum, raised):
    before = signal.getsignal(signum)
    said = tmp_path / "said.txt"
    sink = open(said, "w")
    slow = {("10.0.0.3", "worker"): (None, "starting")}   # its script's server never says it listens
    threading.Timer(0.5, os.kill, args=(os.getpid(), signum)).start()
    with pytest.raises(raised) as info:
        launch(slow, sink=sink, ready_timeout=20)
    if raised is SystemExit:
        assert info.value.code == 143
    assert not [p for p in os.listdir(str(tmp_path)) if p.startswith("job-")]
    started = []
    for runner in Cluster.last.runners.values():
        assert len(runner.removed) == 1 and runner.closed
        started += [h for h in runner.handles if h.poll() is None]
    assert started == []
    sink.flush()
    assert "stopping every process of the job" in said.read_text()
    assert signal.getsignal(signum) is before


class _GoneConsole:
    """A console whose reader is gone: every write fails as a dead pipe's does."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_console_that_is_gone_does_not_keep_the_job_from_being_stopped(launch):
    coordinator, cluster, _ = launch()
    coordinator._sink = _GoneConsole()   # the reader left after the launch (autodist run ... | head)
    coordinator.abort("terminated (SIGTERM)")
    assert all(h.terminated for h in cluster.handles())
    assert all(runner.closed for runner in cluster.runners.values())


def test_a_second_signal_with_the_console_gone_does_not_cut_the_stop_short(launch):
    coordinator, cluster, _ = launch()
    coordinator._sink = _GoneConsole()
    coordinator._still_stopping("Ctrl-C")   # what on_repeat does while abort runs; it must not raise
    coordinator.abort("terminated (SIGTERM)")
    assert all(h.terminated for h in cluster.handles())


def test_a_line_written_from_a_signal_handler_inside_a_write_does_not_hang():
    import threading as _threading
    from autodist.runner import base
    lines = []

    class Sink:
        def write(self, text):
            if not lines:   # a handler fires in the middle of the first write, in the same thread
                lines.append(text)
                base.write_line("autodist", self, "from the handler")
                return
            lines.append(text)

        def flush(self):
            pass

    done = _threading.Event()
    worker = _threading.Thread(target=lambda: (base.write_line("autodist", Sink(), "outer"), done.set()),
                               daemon=True)
    worker.start()
    assert done.wait(10), "write_line deadlocked on its own lock"
    assert lines == ["[autodist] outer\n", "[autodist] from the handler\n"]


# A training script that announces its server, then prints 2 MB: far more than the 200 KiB log disk holds.
CHATTY_NODE = """import sys, time
print({ready!r} + " 1", flush=True)
time.sleep(1.0)   # the chief sees the handshake before the lines push it out of the tail
for i in range(20000):
    print("x" * 99)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_job_whose_log_disk_fills_up_goes_on_and_says_so_once(tmp_path, small_tmpfs):
    """Issue 33, item 1, at the job's level: ~/.autodist/logs on a full disk used to end a healthy job."""
    said = tmp_path / "console.txt"
    with open(str(said), "w") as console:
        coordinator = Coordinator(ResourceSpec.from_dict({"nodes": [{"address": "127.0.0.1", "chief": True},
                                                                    {"address": "127.0.0.2"}]}),
                                  new_job_id(), sink=console, workdir_base=str(tmp_path / "jobs"),
                                  log_base=str(small_tmpfs / "logs"), poll_interval=0.05)
        strategy = tmp_path / "strategy.pb"
        strategy.write_bytes(b"plan")
        try:
            coordinator.launch(str(strategy), ["-c", CHATTY_NODE.format(ready=READY)], str(tmp_path))
            coordinator.finish(timeout=120)
        finally:
            coordinator.abort()
    lines = said.read_text().splitlines()
    notices = [line for line in lines if line.startswith("[autodist] node logs are no longer written")]
    assert len(notices) == 1 and "No space left on device; the job goes on" in notices[0], notices
    assert lines.count("[127.0.0.2] done") == 1 and lines.count("[127.0.0.2] " + "x" * 99) == 20000
