"""Coordinator: the chief's side of a multi-node job.

    launch   pick a server port on every node, make the job's working directory
             there and copy the strategy into it, start a TensorFlow server on
             every other node (``python -m autodist.server``), wait until each
             listens, then start the user's script on every other node with its
             JobContext in the environment
    watch    a thread polls every process; a server that exits, a script that
             fails or a dropped connection stops the whole job at once and is
             reported as ``RemoteWorkerError`` (host, exit code, last log lines)
    finish   wait for the other scripts to end, stop the servers, remove the
             working directories

Processes are started and stopped through a runner (``autodist.runner``):
loopback nodes without an ssh group locally, the others over SSH. Only the
processes the job started are ever signalled, by process group.
"""
import json
import os
import posixpath
import sys
import threading
import time

from autodist.cluster import cpu_count_of
from autodist.errors import LaunchError
from autodist.job import JobContext
from autodist.server import READY

__all__ = ["Coordinator", "default_runner", "WORKDIR_BASE"]

WORKDIR_BASE = "~/.autodist/jobs"
STRATEGY_FILE = "strategy.pb"


def default_runner(node, resource_spec, sink=None):
    """Local runner for a loopback node without an ssh group, an SSH runner otherwise."""
    from autodist.runner import LocalRunner, SSHRunner
    ssh = resource_spec.ssh_config_map.get(node.address)
    if ssh is None:
        if not resource_spec.is_loopback(node.address) and node.address != resource_spec.chief:
            raise LaunchError("node {} has no ssh_config; add one to reach it".format(node.address))
        return LocalRunner(name=node.address, sink=sink)
    return SSHRunner(node.address, ssh, sink=sink)


def _host_port(address, port):
    return "[{}]:{}".format(address, port) if ":" in address else "{}:{}".format(address, port)


class Coordinator:
    """Start, watch and stop the processes of one job (see the module docstring)."""

    def __init__(self, resource_spec, job_id, runner_factory=default_runner, sink=None, poll_interval=0.5,
                 ready_timeout=120.0, python=None, workdir_base=WORKDIR_BASE):
        self.spec = resource_spec
        self.job_id = job_id
        self._runner_factory = runner_factory
        self._sink = sink
        self._poll = poll_interval
        self._ready_timeout = ready_timeout
        self._python = python
        self._base = workdir_base
        self._runners = {}
        self._servers = {}      # address -> handle
        self._workers = {}      # address -> handle
        self._workdirs = {}
        self._failure = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self.context = None

    # -- launch ----------------------------------------------------------------------
    def _python_for(self, runner):
        from autodist.runner import LocalRunner
        if self._python:
            return self._python
        return sys.executable if isinstance(runner, LocalRunner) else "python3"

    def launch(self, strategy_path, argv, cwd):
        """Start the other nodes; returns the chief's JobContext. ``argv`` is the script and its arguments."""
        from autodist.runner import free_port, job_workdir
        chief = self.spec.chief
        used, servers = [], {}
        for node in self.spec.nodes:
            runner = self._runner_factory(node, self.spec, self._sink)
            runner.connect()
            self._runners[node.address] = runner
            port = free_port(runner, exclude=used, python=self._python_for(runner))
            used.append(port)
            servers[node.address] = _host_port(node.address, port)
            self._workdirs[node.address] = job_workdir(self._base, self.job_id)
        self._preflight()
        for address, runner in self._runners.items():
            runner.makedirs(self._workdirs[address])
            runner.copy(strategy_path, posixpath.join(self._workdirs[address], STRATEGY_FILE))
        self.context = JobContext(job_id=self.job_id, address=chief, servers=servers, chief=chief,
                                  strategy_path=os.path.expanduser(posixpath.join(self._workdirs[chief], STRATEGY_FILE)),
                                  workdir=self._workdirs[chief])
        try:
            self._start_servers()
            self._start_workers(argv, cwd)
        except BaseException:
            self.abort()
            raise
        self._thread = threading.Thread(target=self._watch, name="autodist-coordinator", daemon=True)
        self._thread.start()
        return self.context

    def _preflight(self):
        """Check every remote host before anything starts; raises PreflightError naming each failure."""
        from autodist.runner import LocalRunner, local_versions, preflight
        remote = [r for r in self._runners.values() if not isinstance(r, LocalRunner)]
        if remote:
            preflight(remote, local_versions(), timeout=self._ready_timeout,
                      python=self._python or "python3")

    def _log(self, address, role):
        return os.path.join(os.path.expanduser(self._workdirs[self.spec.chief]), "logs",
                            "{}-{}.log".format(address, role))

    def _start_servers(self):
        cluster = json.dumps(self.context.cluster_spec())
        for node in self.spec.nodes:
            if node.address == self.spec.chief:
                continue
            runner = self._runners[node.address]
            argv = [self._python_for(runner), "-m", "autodist.server", "--cluster", cluster,
                    "--task", str(self.context.addresses.index(node.address)),
                    "--cpus", str(cpu_count_of(node)), "--chief-task", str(self.context.chief_task)]
            self._servers[node.address] = runner.run(argv, env={"PYTHONUNBUFFERED": "1"},
                                                     log_path=self._log(node.address, "server"))
        deadline = time.monotonic() + self._ready_timeout
        for address, handle in self._servers.items():
            while READY not in handle.tail(50):
                if handle.poll() is not None:
                    raise handle.failure("its TensorFlow server exited while starting")
                if time.monotonic() > deadline:
                    raise handle.failure("its TensorFlow server did not start within {:.0f} s"
                                         .format(self._ready_timeout))
                time.sleep(0.1)

    def _start_workers(self, argv, cwd):
        for node in self.spec.nodes:
            if node.address == self.spec.chief:
                continue
            runner = self._runners[node.address]
            context = self.context.for_node(node.address, posixpath.join(self._workdirs[node.address], STRATEGY_FILE),
                                            self._workdirs[node.address])
            env = dict(context.to_env(), PYTHONUNBUFFERED="1")
            self._workers[node.address] = runner.run([self._python_for(runner)] + list(argv), env=env, cwd=cwd,
                                                     log_path=self._log(node.address, "worker"))

    # -- watch -----------------------------------------------------------------------
    def failure(self):
        """The first failure of the job, or None."""
        with self._lock:
            return self._failure

    def _watch(self):
        while not self._stop.wait(self._poll):
            for role, handles in (("server", self._servers), ("worker", self._workers)):
                for address, handle in list(handles.items()):
                    code = handle.poll()
                    if code is None or self._stop.is_set():
                        continue
                    if role == "worker" and code == 0 and not getattr(handle, "connection_lost", False):
                        continue
                    what = "its connection was lost" if getattr(handle, "connection_lost", False) else \
                        "its {} exited with code {}".format("TensorFlow server" if role == "server" else "script", code)
                    self._fail(handle.failure(what))
                    return

    def _fail(self, error):
        with self._lock:
            if self._failure is None:
                self._failure = error
        self._terminate_all()

    def _terminate_all(self):
        handles = list(self._workers.values()) + list(self._servers.values())
        threads = [threading.Thread(target=h.terminate, daemon=True) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)

    # -- finish ----------------------------------------------------------------------
    def finish(self, timeout=120.0):
        """Wait for the other nodes' scripts, then stop everything; raises their failure, if any."""
        deadline = time.monotonic() + timeout
        for address, handle in self._workers.items():
            remaining = max(0.0, deadline - time.monotonic())
            if handle.wait(remaining) is None and self.failure() is None:
                self._fail(handle.failure("its script was still running {:.0f} s after the chief finished"
                                          .format(timeout)))
        self.abort()
        failure = self.failure()
        if failure is not None:
            raise failure

    def abort(self):
        """Stop every process of the job now and clean up; idempotent."""
        self._stop.set()
        self._terminate_all()
        for address, runner in self._runners.items():
            try:
                runner.remove_tree(self._workdirs[address])
            except (OSError, LaunchError, ValueError):
                pass  # best effort: a node that is gone keeps its directory
            runner.close()
        self._runners.clear()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

