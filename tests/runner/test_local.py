"""LocalRunner: argv without a shell, own process group, prefixed output, clean stop."""
import io
import os
import signal
import sys

import pytest

from autodist.errors import LaunchError, RemoteWorkerError
from autodist.runner.base import run_for_output
from autodist.runner.local import LocalRunner

PY = sys.executable


@pytest.fixture
def out():
    return io.StringIO()


@pytest.fixture
def runner(out):
    with LocalRunner("127.0.0.1", sink=out) as r:
        yield r


def test_output_is_prefixed_with_the_node_name(runner, out):
    handle = runner.run([PY, "-c", "import sys; print('one'); print('two', file=sys.stderr)"])
    assert handle.wait(30) == 0
    assert sorted(out.getvalue().splitlines()) == ["[127.0.0.1] one", "[127.0.0.1] two"]


def test_exit_code_tail_and_failure(runner):
    handle = runner.run([PY, "-c", "for i in range(50): print('line', i)\nraise SystemExit(3)"])
    assert handle.wait(30) == 3
    assert handle.poll() == 3
    assert handle.tail(2) == "line 48\nline 49"
    assert handle.tail(0) == ""
    error = handle.failure()
    assert isinstance(error, RemoteWorkerError)
    assert (error.host, error.exit_code) == ("127.0.0.1", 3)
    assert "line 49" in error.log_tail and "127.0.0.1" in str(error)


def test_last_line_without_newline_and_bad_utf8_are_kept(runner):
    handle = runner.run([PY, "-c", "import sys; sys.stdout.buffer.write(b'ok\\n\\xff tail')"])
    assert handle.wait(30) == 0
    assert handle.tail(2) == "ok\n\ufffd tail"


def test_log_file_gets_every_line(runner, tmp_path):
    log = tmp_path / "logs" / "worker.log"
    handle = runner.run([PY, "-c", "print('a'); print('b')"], log_path=str(log))
    assert handle.wait(30) == 0
    assert handle.wait(30) == 0  # the reader has drained the pipe
    assert log.read_text() == "a\nb\n"


def test_env_is_laid_over_the_environment_and_cwd_is_used(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTODIST_TEST_INHERITED", "inherited")
    hostile = "$(id) `id` 'q' \"d\"\nline2"
    workdir = tmp_path / "dir with spaces"
    workdir.mkdir()
    code, output = run_for_output(runner, [PY, "-c", "import os; print(repr((os.getcwd(), "
                                           "os.environ['AUTODIST_TEST_INHERITED'], os.environ['H'])))"],
                                  timeout=30, env={"H": hostile}, cwd=str(workdir))
    assert code == 0
    assert output == repr((str(workdir), "inherited", hostile))


def test_wait_times_out_and_terminate_stops_the_whole_group(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "sleep 300 & sleep 300 & echo started; wait"])
    try:
        assert poll_until(lambda: "started" in handle.tail(), 10)
        assert handle.wait(timeout=0.2) is None and handle.poll() is None
        assert handle.pgid == handle.pid and os.getpgid(handle.pid) == handle.pid
        assert len(group_pids(handle.pgid)) == 3
        assert handle.terminate(grace=5.0) == 128 + signal.SIGTERM
        assert poll_until(lambda: not group_pids(handle.pgid))
        assert handle.terminate() == 128 + signal.SIGTERM  # idempotent
    finally:
        handle.terminate(grace=0.5)


def test_terminate_kills_what_ignores_term(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "trap '' TERM; sleep 300 & echo started; wait"])
    try:
        assert poll_until(lambda: "started" in handle.tail(), 10)
        assert handle.terminate(grace=0.5) == 128 + signal.SIGKILL
        assert poll_until(lambda: not group_pids(handle.pgid))
    finally:
        handle.terminate(grace=0.5)


def test_terminate_after_exit_stops_leftovers_of_the_group(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "sleep 300 & echo started"])
    try:
        assert handle.wait(30) == 0
        assert len(group_pids(handle.pgid)) == 1  # the orphaned sleep
        assert handle.terminate(grace=2.0) == 0
        assert poll_until(lambda: not group_pids(handle.pgid))
    finally:
        handle.terminate(grace=0.5)


def test_terminate_leaves_other_groups_alone(runner, group_pids):
    first = runner.run(["sleep", "300"])
    second = runner.run(["sleep", "300"])
    try:
        first.terminate(grace=2.0)
        assert second.poll() is None and group_pids(second.pgid) == [second.pid]
    finally:
        first.terminate(grace=0.5)
        second.terminate(grace=0.5)


def test_a_program_that_cannot_start_is_a_launch_error(runner):
    with pytest.raises(LaunchError, match="no-such-program-xyz"):
        runner.run(["no-such-program-xyz"])


def test_argv_must_be_a_list(runner, tmp_path):
    with pytest.raises(ValueError, match="list of strings"):
        runner.run("echo hi")
    script = tmp_path / "s.py"
    script.write_text("print('from a path')")
    assert run_for_output(runner, [PY, script], 30) == (0, "from a path")


def test_invalid_env_name_is_rejected(runner):
    with pytest.raises(ValueError, match="BAD NAME"):
        runner.run(["true"], env={"BAD NAME": "x"})


def test_files(runner, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("payload")
    single = tmp_path / "single.txt"
    single.write_text("one")
    job = tmp_path / "job dir"
    runner.makedirs(str(job / "a" / "b"))
    runner.makedirs(str(job / "a" / "b"))  # exists: no error
    runner.copy(str(src), str(job / "copied"))
    runner.copy(str(single), str(job / "new parent" / "single.txt"))
    assert (job / "copied" / "sub" / "f.txt").read_text() == "payload"
    assert (job / "new parent" / "single.txt").read_text() == "one"
    runner.remove_tree(str(job))
    runner.remove_tree(str(job))  # missing: no error
    assert not job.exists()
    for path in ["/", "", "~"]:
        with pytest.raises(ValueError):
            runner.remove_tree(path)


def test_a_copy_names_the_operation_and_the_path_that_failed(runner, tmp_path, small_tmpfs):
    """Issue 33, item 10: a full target disk was reported as 'cannot read <the source file>'."""
    big = tmp_path / "strategy.pb"
    big.write_bytes(os.urandom(400 * 1024))   # twice what the disk holds
    target = small_tmpfs / "jobs" / "job-x" / "strategy.pb"
    with pytest.raises(LaunchError) as full:
        runner.copy(str(big), str(target))
    assert str(full.value) == "127.0.0.1: cannot write {} (copying {} to {}): No space left on device".format(
        target, big, target)
    missing = tmp_path / "gone.pb"
    with pytest.raises(LaunchError) as unreadable:
        runner.copy(str(missing), str(tmp_path / "to.pb"))
    assert str(unreadable.value).startswith("127.0.0.1: cannot read {} (copying".format(missing))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "calibration.json").write_bytes(os.urandom(400 * 1024))
    with pytest.raises(LaunchError, match="cannot write {}".format(small_tmpfs / "tree" / "calibration.json")):
        runner.copy(str(tree), str(small_tmpfs / "tree"))


def test_a_copy_keeps_the_mode_of_the_source(runner, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(str(script), 0o750)
    runner.copy(str(script), str(tmp_path / "out" / "run.sh"))
    assert os.stat(str(tmp_path / "out" / "run.sh")).st_mode & 0o777 == 0o750
