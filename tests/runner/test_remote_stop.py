"""Stopping a stalled remote node: the SSH runner's kill, run through a local shell instead of sshd.

``SSHRunner.kill_group`` sends ``shell.kill_command`` over a channel; here the
channel is replaced by ``sh -c`` on this machine (what the remote login shell
does with it), so the stop of a group stopped with SIGSTOP is checked without
an SSH server (``tests/runner/test_ssh.py`` has the same check over sshd).
"""
import os
import signal
import subprocess
import sys
import threading

from autodist.runner.ssh import SSHRunner
from autodist.spec.resource_spec import ResourceSpec

TERM_HANDLER = [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                "sys.exit(7)); print('ready', flush=True); time.sleep(300)"]


class _LocalShellRunner(SSHRunner):
    """An SSHRunner whose helper commands run in a local ``sh -c`` (the remote shell's part)."""

    def __init__(self):
        spec = ResourceSpec.from_dict({"nodes": [{"address": "10.0.0.1", "chief": True},
                                                 {"address": "10.0.0.2", "ssh_config": "g"}],
                                       "ssh": {"g": {"username": "u"}}})
        super().__init__("10.0.0.2", spec.ssh_config_map["10.0.0.2"])
        self.commands = []

    def _exec(self, command, what, timeout):
        self.commands.append(command)
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout + done.stderr


def test_the_kill_of_a_stopped_group_acts_at_once_and_leaves_nothing(group_pids, poll_until):
    runner = _LocalShellRunner()
    proc = subprocess.Popen(TERM_HANDLER, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"   # a SIGTERM handler: stopped, it waits for a CONT
        os.killpg(proc.pid, signal.SIGSTOP)
        reaper = threading.Thread(target=proc.wait, daemon=True)
        reaper.start()   # reap the leader as soon as it dies, as a remote login shell does
        killed = []
        killer = threading.Thread(target=lambda: killed.append(runner.kill_group(proc.pid, grace=120.0)), daemon=True)
        killer.start()
        killer.join(60)   # half its grace: it returns when the group is gone, not when the grace is over
        assert killed == [True], "kill_group still waits for its grace"
        assert proc.wait(5) == 7   # its handler ran: the TERM acted, not the KILL
        assert poll_until(lambda: not group_pids(proc.pid))
        assert "kill -s CONT" in runner.commands[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
