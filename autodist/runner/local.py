"""Runner for processes on this machine (loopback nodes without ``ssh``).

Each process is started with ``start_new_session=True``: it leads a new
session and process group whose id is its pid, and ``terminate`` signals that
group and nothing else.  Unlike the SSH runner there is no watchdog: members
of the group that outlive the leader stay until ``terminate`` is called, which
the coordinator does for every handle at teardown.
"""
import os
import shutil
import signal
import subprocess
import threading

from autodist.errors import LaunchError
from autodist.runner.base import OutputPump, ProcessHandle, Runner, wait_until
from autodist.runner.shell import check_removable, validate_argv, validate_env

__all__ = ["LocalRunner", "LocalProcessHandle", "live_group_members", "start_process", "copy_file"]

COPY_CHUNK = 1 << 20


def _shell_code(code):
    """subprocess reports death by signal N as -N; the shell (and SSH) as 128 + N."""
    if code is not None and code < 0:
        return 128 - code
    return code


def live_group_members(pgid):
    """Pids of processes in group ``pgid`` that are not zombies (Linux ``/proc``).

    Returns None where ``/proc`` is unavailable.
    """
    if not os.path.isdir("/proc/self"):
        return None
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/{}/stat".format(entry), "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            members.append(int(entry))
    return members


class LocalProcessHandle(ProcessHandle):

    def __init__(self, name, argv, popen, pump):
        super().__init__(name, argv, pump)
        self._popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session: the child leads its own group
        self._term_lock = threading.Lock()
        self._terminated = False
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="autodist-output-{}-{}".format(name, self.pid))
        self._reader.start()

    def _read(self):
        stream = self._popen.stdout
        try:
            while True:
                chunk = stream.read1(65536)
                if not chunk:
                    break
                self._pump.feed(chunk)
        finally:
            stream.close()
            self._pump.close()

    def poll(self):
        return _shell_code(self._popen.poll())

    def wait(self, timeout=None):
        try:
            code = self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        # Let the reader drain what the process wrote before it exited; a
        # leftover child still holding the pipe must not block us.
        self._reader.join(timeout=0.5)
        return _shell_code(code)

    def _group_gone(self):
        self._popen.poll()  # reap the leader: a zombie is not a live process
        try:
            os.killpg(self.pgid, 0)
        except (ProcessLookupError, PermissionError):
            # PermissionError: the id now belongs to someone else's group.
            return True
        members = live_group_members(self.pgid)
        return members is not None and not members

    def _signal_group(self, sig):
        if self._group_gone():
            return
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self, grace=5.0):
        with self._term_lock:
            if not self._terminated:
                self._terminated = True
                self._signal_group(signal.SIGTERM)
                self._signal_group(signal.SIGCONT)   # a stopped process (SIGSTOP) acts on the TERM now
                if not wait_until(self._group_gone, grace):
                    self._signal_group(signal.SIGKILL)
                    wait_until(self._group_gone, 5.0)
        return self.wait(timeout=5.0)


def copy_file(name, src, dst):
    """Copy file ``src`` to ``dst`` with its mode; ``LaunchError`` says whether reading ``src`` or writing
    ``dst`` failed (shutil's errors name the source also when the target's disk is full)."""
    failing = ("read", src)
    try:
        with open(src, "rb") as source:
            failing = ("write", dst)
            with open(dst, "wb") as target:   # its close flushes: still a write
                while True:
                    failing = ("read", src)
                    chunk = source.read(COPY_CHUNK)
                    if not chunk:
                        break
                    failing = ("write", dst)
                    target.write(chunk)
                failing = ("write", dst)
        failing = ("set the mode of", dst)
        shutil.copymode(src, dst)
    except OSError as e:
        verb, path = failing
        raise LaunchError("{}: cannot {} {} (copying {} to {}): {}".format(
            name, verb, path, src, dst, e.strerror or e)) from e


def start_process(name, argv, env=None, cwd=None, log_path=None, sink=None, handle_class=LocalProcessHandle,
                  stdin=subprocess.DEVNULL):
    """Start ``argv`` here in a new session, ``env`` laid over ours; a ``handle_class`` for it.

    ``stdin``: what ``subprocess.Popen`` takes (PIPE to write to the process).
    A program that cannot be started raises ``LaunchError``.
    """
    argv = validate_argv(argv)
    full_env = dict(os.environ)
    full_env.update(validate_env(env))
    workdir = os.path.expanduser(cwd) if cwd is not None else None
    pump = OutputPump(name, sink, log_path)
    try:
        popen = subprocess.Popen(argv, env=full_env, cwd=workdir, stdin=stdin, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        pump.close()
        raise LaunchError("{}: cannot start {!r} (cwd {!r}): {}".format(name, argv[0], workdir, e)) from e
    return handle_class(name, argv, popen, pump)


class LocalRunner(Runner):
    """Runs argv lists directly (no shell) on this machine.

    ``env`` is laid over this process's environment.  A program that cannot
    be started at all raises ``LaunchError``.
    """

    def __init__(self, name="127.0.0.1", sink=None):
        self.name = name
        self._sink = sink

    def run(self, argv, env=None, cwd=None, log_path=None, sink=None):
        return start_process(self.name, argv, env, cwd, log_path, sink if sink is not None else self._sink)

    def copy(self, local_src, remote_dst):
        """Copy a file (with its mode) or a tree; ``LaunchError`` names the operation and the path that failed."""
        dst = os.path.expanduser(remote_dst)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
            if os.path.isdir(local_src):
                shutil.copytree(local_src, dst, dirs_exist_ok=True,
                                copy_function=lambda src, to: copy_file(self.name, src, to))
            else:
                copy_file(self.name, local_src, dst)
        except OSError as e:   # a directory that cannot be made (copy_file names its own failures)
            raise LaunchError("{}: cannot copy {} to {}: {}".format(self.name, local_src, dst, e)) from e

    def makedirs(self, path):
        os.makedirs(os.path.expanduser(path), exist_ok=True)

    def remove_tree(self, path):
        target = os.path.expanduser(check_removable(path))
        if os.path.realpath(target) == os.path.realpath(os.path.expanduser("~")):
            raise ValueError("refusing to remove {!r}: it is the home directory".format(path))
        if os.path.islink(target) or os.path.isfile(target):
            os.unlink(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
