"""SSHRunner against the loopback sshd: commands, environment, stopping, connection loss."""
import io
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from autodist.errors import LaunchError
from autodist.runner.base import CONNECTION_LOST, run_for_output
from autodist.runner.ssh import SSHRunner

pytestmark = pytest.mark.ssh

PY = sys.executable
ECHO = ("import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        "'env': {k: os.environ.get(k) for k in sys.argv[1:]}}))")
HOSTILE = {
    "SPACES": "a b  c", "QUOTES": "'single' \"double\"", "SUBST": "$(touch /tmp/autodist-pwned)",
    "BACKTICK": "`touch /tmp/autodist-pwned`", "NEWLINE": "one\ntwo\n", "SEMI": "x; exit 3",
    "AND": "a && b || c", "UNICODE": "é☃𝄞", "DOLLAR": "$HOME ${PATH} $$", "EMPTY": "",
}


@pytest.fixture
def out():
    return io.StringIO()


@pytest.fixture
def runner(sshd, out):
    with SSHRunner(sshd.host, sshd.config(), sink=out) as r:
        yield r


def echo(runner, keys, cwd=None, env=None):
    code, output = run_for_output(runner, [PY, "-c", ECHO] + list(keys), timeout=30, env=env, cwd=cwd)
    assert code == 0, output
    return json.loads(output)


def test_hostile_env_argv_and_cwd_arrive_verbatim(runner, tmp_path):
    workdir = tmp_path / "work dir 'with' $(quotes)"
    workdir.mkdir()
    got = echo(runner, HOSTILE, cwd=str(workdir), env=HOSTILE)
    assert got == {"argv": list(HOSTILE), "cwd": str(workdir), "env": HOSTILE}
    assert not os.path.exists("/tmp/autodist-pwned")


def test_output_is_prefixed_and_kept(runner, out, tmp_path):
    log = tmp_path / "remote.log"
    handle = runner.run(["sh", "-c", "echo out; echo err >&2; exit 4"], log_path=str(log))
    assert handle.wait(30) == 4
    assert handle.pgid is not None and not handle.connection_lost
    assert sorted(out.getvalue().splitlines()) == ["[127.0.0.2] err", "[127.0.0.2] out"]
    assert sorted(log.read_text().splitlines()) == ["err", "out"]
    assert handle.terminate() == 4  # already over: nothing to stop


def test_python_venv_prefix_and_shared_envs(sshd, venv_prefix):
    config = sshd.config(python_venv=venv_prefix + "; export FROM_VENV=yes",
                         shared_envs={"SHARED": "s $(x)", "BOTH": "shared"})
    with SSHRunner(sshd.host, config) as runner:
        got = echo(runner, ["SHARED", "BOTH", "FROM_VENV"], env={"BOTH": "call"})
        code, output = run_for_output(runner, ["python3", "-c", "import sys; print(sys.executable)"], 30)
    assert got["env"] == {"SHARED": "s $(x)", "BOTH": "call", "FROM_VENV": "yes"}
    assert (code, os.path.dirname(output)) == (0, os.path.dirname(PY))


def test_failing_python_venv_is_reported_in_the_exit_code(sshd):
    with SSHRunner(sshd.host, sshd.config(python_venv="source /no/such/venv/bin/activate")) as r:
        handle = r.run(["true"], sink=io.StringIO())
        assert handle.wait(30) not in (0, None)
        assert handle.pgid is None and "/no/such/venv" in handle.tail()


def test_terminate_stops_every_process_of_the_group(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "sleep 300 & sleep 300 & echo started; wait"])
    try:
        assert poll_until(lambda: "started" in handle.tail(), 10)
        assert len(group_pids(handle.pgid)) == 4  # sh, two sleeps, the watchdog
        assert handle.terminate(grace=5.0) == 128 + signal.SIGTERM
        assert poll_until(lambda: not group_pids(handle.pgid))
        assert handle.terminate() == 128 + signal.SIGTERM
    finally:
        handle.terminate(grace=0.5)


def test_terminate_escalates_to_kill(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "trap '' TERM; sleep 300 & echo started; wait"])
    try:
        assert poll_until(lambda: "started" in handle.tail(), 10)
        assert handle.terminate(grace=0.5) == 128 + signal.SIGKILL
        assert poll_until(lambda: not group_pids(handle.pgid))
    finally:
        handle.terminate(grace=0.5)


def test_terminate_right_after_run_waits_for_a_slow_venv_prefix(sshd, group_pids, poll_until):
    with SSHRunner(sshd.host, sshd.config(python_venv="sleep 1")) as runner:
        handle = runner.run(["sleep", "300"], sink=io.StringIO())
        try:
            assert handle.terminate(grace=0.5) == 128 + signal.SIGTERM
            assert handle.pgid is not None and poll_until(lambda: not group_pids(handle.pgid))
        finally:
            handle.terminate(grace=0.5)


def test_terminate_wakes_a_stopped_remote_group(sshd, group_pids, poll_until):
    """A stalled node (SIGSTOP) acts on the TERM at once: the kill sends CONT, no KILL is needed."""
    with SSHRunner(sshd.host, sshd.config()) as runner:
        handle = runner.run([PY, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                             "sys.exit(7)); print('ready', flush=True); time.sleep(300)"], sink=io.StringIO())
        try:
            assert poll_until(lambda: "ready" in handle.tail(), 30)   # it has a SIGTERM handler
            os.killpg(handle.pgid, signal.SIGSTOP)   # the loopback "remote" group: the program and its watchdog
            assert handle.terminate(grace=30.0) == 7   # its handler ran, within the grace
            assert poll_until(lambda: not group_pids(handle.pgid), 5)
        finally:
            handle.terminate(grace=0.5)


def test_group_dies_with_its_leader(runner, group_pids, poll_until):
    handle = runner.run(["sh", "-c", "sleep 300 & echo $!"])
    assert handle.wait(30) == 0
    assert poll_until(lambda: not group_pids(handle.pgid))


def test_connection_drop_is_detected_and_remote_group_stops(sshd, group_pids, poll_until):
    runner = SSHRunner(sshd.host, sshd.config(), sink=io.StringIO())
    handle = runner.run(["sh", "-c", "sleep 300 & echo started; wait"])
    try:
        assert poll_until(lambda: "started" in handle.tail(), 10)
        pgid = handle.pgid
        # Cut the TCP connection under paramiko's feet, as a network failure would.
        runner._client.get_transport().sock.shutdown(socket.SHUT_RDWR)
        assert handle.wait(10) == CONNECTION_LOST
        assert handle.connection_lost
        error = handle.failure()
        assert error.host == sshd.host and "connection" in str(error)
        # sshd closes the command's stdin; its watchdog stops the group.
        assert poll_until(lambda: not group_pids(pgid), 15)
        # terminate reconnects to make sure, and does not fail.
        assert handle.terminate(grace=1.0) == CONNECTION_LOST
    finally:
        runner.close()


def test_runner_reconnects_after_a_drop(sshd):
    with SSHRunner(sshd.host, sshd.config()) as runner:
        runner.connect()
        runner._client.get_transport().close()
        code, output = run_for_output(runner, ["echo", "again"], 30)
        assert (code, output) == (0, "again")


def test_missing_remote_program_exits_127(runner):
    code, output = run_for_output(runner, ["no-such-program-xyz"], 30)
    assert code == 127 and "no-such-program-xyz" in output


def test_files_over_ssh(runner, tmp_path):
    src = tmp_path / "src"
    (src / "sub dir").mkdir(parents=True)
    (src / "sub dir" / "f.txt").write_text("payload")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(src / "run.sh", 0o755)
    job = tmp_path / "job 'one' $(x)"
    runner.makedirs(str(job / "a" / "b"))
    assert (job / "a" / "b").is_dir()
    runner.copy(str(src), str(job / "copied"))
    runner.copy(str(src / "run.sh"), str(job / "new parent" / "run.sh"))
    assert (job / "copied" / "sub dir" / "f.txt").read_text() == "payload"
    assert os.access(job / "new parent" / "run.sh", os.X_OK)
    runner.remove_tree(str(job))
    runner.remove_tree(str(job))
    assert not job.exists()
    with pytest.raises(ValueError):
        runner.remove_tree("/")


def test_makedirs_failure_is_a_launch_error(runner, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(LaunchError, match="mkdir"):
        runner.makedirs(str(blocker / "sub"))


def test_a_stop_the_chief_asked_for_is_not_reported_on_the_console(runner, out, tmp_path, poll_until):
    """The remote login shell reports the command it waited for as 'Terminated': that line stays in the log
    (issue 33, item 12: a successful SSH job's console ended with '[127.0.0.2] Terminated')."""
    log = tmp_path / "server.log"
    handle = runner.run(["sleep", "60"], log_path=str(log))
    assert poll_until(lambda: handle.pgid is not None, 10)
    assert handle.terminate(grace=5.0) == 128 + signal.SIGTERM
    assert "Terminated" not in out.getvalue()
    assert log.read_text().splitlines() == ["Terminated"]
    assert handle.tail(1) == "Terminated"


def test_a_script_that_prints_terminated_itself_is_shown(runner, out):
    assert run_for_output(runner, ["sh", "-c", "echo Terminated"], timeout=30) == (0, "Terminated")
    handle = runner.run(["sh", "-c", "echo Terminated"])
    assert handle.wait(30) == 0
    assert out.getvalue() == "[127.0.0.2] Terminated\n"


BANNER = """import socket, sys, threading
from autodist.errors import LaunchError
from autodist.runner.ssh import SSHRunner
from autodist.spec.resource_spec import SSHConfig
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)

def answer():   # not an SSH server: no banner, then the connection closes
    conn, _ = server.accept()
    conn.sendall(b"HTTP/1.1 400 Bad Request\\r\\n\\r\\n")
    conn.close()
threading.Thread(target=answer, daemon=True).start()
config = SSHConfig(username="u", port=server.getsockname()[1], key_file=None, python_venv="", shared_envs={},
                   accept_new_host_keys=True, known_hosts_file=sys.argv[1], connect_timeout=5.0)
try:
    SSHRunner("127.0.0.1", config).connect()
except LaunchError as e:
    print("autodist: error: {}".format(e), file=sys.stderr)
"""


def test_a_host_that_sends_no_ssh_banner_gives_one_line_without_paramikos_traceback(tmp_path):
    result = subprocess.run([PY, "-c", BANNER, str(tmp_path / "known_hosts")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    assert result.stderr.splitlines() == [line for line in result.stderr.splitlines()
                                          if line.startswith("autodist: error: ")], result.stderr
    assert "Error reading SSH protocol banner" in result.stderr and "Traceback" not in result.stderr


def test_a_node_that_answers_is_reachable_and_one_that_is_silent_is_not(sshd, monkeypatch):
    with SSHRunner(sshd.host, sshd.config()) as runner:
        assert runner.unreachable() is None   # its sshd answers
    with SSHRunner(sshd.host, sshd.config(port=unused_port())) as runner:
        assert runner.unreachable() is None   # refused: the machine and its network answer

    def silent(address, timeout):
        raise socket.timeout("timed out")
    monkeypatch.setattr(socket, "create_connection", silent)
    with SSHRunner(sshd.host, sshd.config()) as runner:
        assert runner.unreachable(timeout=3.0) == "no answer from {}:{} within 3 s (TimeoutError: timed out)".format(
            sshd.host, sshd.port)


def unused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]
