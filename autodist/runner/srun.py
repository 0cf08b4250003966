"""Runner for a node of the current Slurm allocation, reached with ``srun`` instead of SSH.

Every ``run`` is one job step of one task on that host, started from the
chief inside the allocation::

    srun --nodes=1 --ntasks=1 --nodelist=gpu07 --overlap --kill-on-bad-exit=1 --unbuffered --quiet
         --job-name=autodist --chdir=/home/me/project env -- K=v python train.py

``--overlap`` lets the step share the CPUs, memory and GPUs the chief's own
step already holds (without it the step waits for free resources until the
allocation ends); ``--unbuffered`` passes the node's output on as it comes,
so the once-a-second reports (``autodist.runner.frames``), which end without
a newline, reach the chief at once. The argv runs without a shell: srun hands
it to the node as a list, so nothing needs quoting; the environment goes as
``env -- K=v`` words (srun exports the chief's environment as well, as it
does by default). File operations run ``sh -c`` with text from
``autodist.runner.shell``, the one place where shell text is built; ``copy``
streams the file (or a tar of the directory) through the step's stdin, so the
job directory need not be on a shared file system. The script and the
working directory must be at the same path on every node, as with SSH.

Stopping: the local ``srun`` process forwards the signals it gets to the
step's task, so ``terminate`` sends it SIGTERM; if the task is still there
after the grace period, two SIGINTs within a second make srun kill the step
(SIGKILL on the node), and srun itself is killed last. Exit codes follow the
shell convention (srun reports ``128 + N`` for a task ended by signal N).

A step must not outlive the chief, even one killed outright, yet nothing on
the node notices that the chief is gone (the task's parent is slurmstepd). So
``srun`` runs under a small guard process, the leader of its process group,
that waits for it and, should the chief die, stops it as ``terminate`` does.
The guard ignores the signals ``terminate`` sends to the group; srun gets them.

``connect`` (run by preflight) checks that ``srun`` is on PATH and that the
host is in the allocation (``SLURM_JOB_NODELIST``), each failure a
``LaunchError`` naming the variable or host and the fix.
"""
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading

from autodist.errors import LaunchError
from autodist.runner.base import DISCARD, Runner, run_for_output, wait_until
from autodist.runner.local import LocalProcessHandle, LocalRunner, start_process
from autodist.runner.shell import (extract_tree_command, makedirs_command, remove_tree_command,
                                   validate_env, write_file_command)

__all__ = ["SrunRunner", "SrunProcessHandle", "srun_runner", "pick_launcher", "step_argv", "allocation_hosts",
           "STEP_OPTIONS", "LAUNCHERS"]

STEP_OPTIONS = ("--nodes=1", "--ntasks=1", "--overlap", "--kill-on-bad-exit=1", "--unbuffered", "--quiet",
                "--job-name=autodist")
FILE_TIMEOUT = 60.0   # s a file operation on a node may take
KILL_WAIT = 5.0       # s between srun killing the step and srun itself being killed
GUARD_GRACE = 5.0     # s the guard gives the task between SIGTERM and the step's kill once the chief is gone
LAUNCHERS = ("ssh", "srun")

# argv[1]: the grace in seconds; argv[2:]: the srun command. Exit status: srun's (128 + N after signal N).
_GUARD = """import os, signal, subprocess, sys, time
chief, grace = os.getppid(), float(sys.argv[1])
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda *_: None)
srun = subprocess.Popen(sys.argv[2:])
def stop():
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGINT, 0.0), (signal.SIGINT, 5.0), (signal.SIGKILL, 0.0)):
        if srun.poll() is None:
            srun.send_signal(sig)
        end = time.monotonic() + wait
        while srun.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
while srun.poll() is None:
    time.sleep(0.5)
    if os.getppid() != chief:
        stop()
code = srun.wait()
sys.exit(128 - code if code < 0 else code)
"""


def pick_launcher(launcher, environ):
    """``launcher`` checked; None: ``"srun"`` inside a Slurm allocation (``SLURM_JOB_NODELIST`` set), else ``"ssh"``."""
    if launcher is None:
        return "srun" if environ.get("SLURM_JOB_NODELIST") else "ssh"
    if launcher not in LAUNCHERS:
        raise LaunchError("unknown launcher {!r}: use one of {}".format(launcher, ", ".join(LAUNCHERS)))
    return launcher


def allocation_hosts(environ):
    """The host names of the allocation ``environ`` describes; ``LaunchError`` outside of one."""
    from autodist.errors import ResourceSpecError
    from autodist.spec.convert import expand_hostlist
    text = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not text:
        raise LaunchError("SLURM_JOB_NODELIST is not set: the srun launcher runs inside a Slurm allocation "
                          "(an sbatch script, salloc, or srun --pty); elsewhere use --launcher ssh")
    try:
        return expand_hostlist(text)
    except ResourceSpecError as e:
        raise LaunchError(str(e)) from e


def step_argv(host, argv, env=None, cwd=None, srun="srun", guard=True):
    """The command line running ``argv`` as a one-task step on ``host`` (see the module docstring): ``srun ...``,
    under the guard (``python -c <guard> <grace> srun ...``) unless ``guard`` is False."""
    words = [sys.executable, "-c", _GUARD, repr(GUARD_GRACE)] if guard else []
    words += [srun] + list(STEP_OPTIONS) + ["--nodelist=" + host]
    if cwd is not None:
        words.append("--chdir=" + os.path.expanduser(cwd))
    env = validate_env(env)
    if env:
        words += ["env", "--"] + ["{}={}".format(k, v) for k, v in env.items()]
    return words + list(argv)


class SrunProcessHandle(LocalProcessHandle):
    """The guarded local ``srun`` process of one step; stopping it stops the step (see the module docstring).

    Signals go to the process group: the guard ignores them, srun acts on them.
    """

    @property
    def stdin(self):
        """The step's stdin (a pipe when started with ``stdin=subprocess.PIPE``, else None)."""
        return self._popen.stdin

    def _signal_srun(self, sig):
        if self._popen.poll() is None:
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _srun_gone(self):
        return self._popen.poll() is not None

    def terminate(self, grace=5.0):
        with self._term_lock:
            if not self._terminated:
                self._terminated = True
                self._signal_srun(signal.SIGTERM)   # forwarded to the task
                if not wait_until(self._srun_gone, grace):
                    self._signal_srun(signal.SIGINT)
                    self._signal_srun(signal.SIGINT)   # a second within a second: srun kills the step
                    if not wait_until(self._srun_gone, KILL_WAIT):
                        self._signal_srun(signal.SIGKILL)
        return self.wait(timeout=5.0)


class SrunRunner(Runner):
    """A host of the current Slurm allocation; processes are job steps started with ``srun``.

    ``environ`` is where ``connect`` reads the allocation (default: this
    process's environment, the one ``srun`` starts with).
    """

    def __init__(self, host, sink=None, srun="srun", environ=None):
        self.name = host
        self.host = host
        self._srun = srun
        self._environ = os.environ if environ is None else environ
        self._sink = sink

    @property
    def where(self):
        return "srun --nodelist={}".format(self.host)

    def connect(self):
        if shutil.which(self._srun, path=self._environ.get("PATH")) is None:
            raise LaunchError("{}: {!r} is not on PATH ({}); load Slurm's client commands (e.g. `module load "
                              "slurm`) or use --launcher ssh".format(self.where, self._srun,
                                                                      self._environ.get("PATH", "unset")))
        hosts = allocation_hosts(self._environ)
        if self.host not in hosts:
            raise LaunchError("{}: host {} is not in this Slurm allocation (SLURM_JOB_NODELIST={}: {}); list only "
                              "the allocation's hosts in the resource spec, or leave out -r to derive it".format(
                                  self.where, self.host, self._environ.get("SLURM_JOB_NODELIST"), " ".join(hosts)))

    def run(self, argv, env=None, cwd=None, log_path=None, sink=None):
        return start_process(self.name, step_argv(self.host, argv, env, cwd, self._srun), None, None, log_path,
                             sink if sink is not None else self._sink, handle_class=SrunProcessHandle)

    def _shell(self, text, what):
        code, output = run_for_output(self, ["sh", "-c", text], FILE_TIMEOUT)
        if code != 0:
            raise LaunchError("{}: {} failed (exit code {}): {}".format(
                self.where, what, code, output.strip()[-500:] or "no output"))

    def makedirs(self, path):
        self._shell(makedirs_command(path), "mkdir -p {!r}".format(path))

    def remove_tree(self, path):
        self._shell(remove_tree_command(path), "rm -rf {!r}".format(path))

    def copy(self, local_src, remote_dst):
        """Stream ``local_src`` (a file, or a directory as tar) through the step's stdin to ``remote_dst``."""
        tree = os.path.isdir(local_src)
        text = extract_tree_command(remote_dst) if tree else write_file_command(remote_dst)
        handle = start_process(self.name, step_argv(self.host, ["sh", "-c", text], srun=self._srun),
                               sink=DISCARD, handle_class=SrunProcessHandle,
                               stdin=subprocess.PIPE)
        feeder = threading.Thread(target=_feed, args=(handle.stdin, local_src, tree), daemon=True,
                                  name="autodist-srun-copy-{}".format(self.host))
        feeder.start()
        code = handle.wait(FILE_TIMEOUT)
        if code is None:
            handle.terminate(grace=1.0)
        if code != 0:
            raise LaunchError("{}: copying {} to {} failed ({}): {}".format(
                self.where, local_src, remote_dst, "no end within {:.0f} s".format(FILE_TIMEOUT) if code is None
                else "exit code {}".format(code), handle.tail().strip()[-500:] or "no output"))


def _feed(stream, local_src, tree):
    """Write the file, or a tar of the directory's contents, to ``stream`` and close it."""
    try:
        if tree:
            with tarfile.open(fileobj=stream, mode="w|") as archive:
                for name in sorted(os.listdir(local_src)):
                    archive.add(os.path.join(local_src, name), arcname=name)
        else:
            with open(local_src, "rb") as source:
                shutil.copyfileobj(source, stream)
    except OSError:
        pass   # the step ended early; its exit code says why
    finally:
        try:
            stream.close()
        except OSError:
            pass


def srun_runner(node, resource_spec, sink=None):
    """The runner factory of ``--launcher srun``: the chief (this process's node) runs locally, every other
    node through ``srun``."""
    if node.address == resource_spec.chief:
        return LocalRunner(name=node.address, sink=sink)
    return SrunRunner(node.address, sink=sink)
