"""How the chief starts a process on another node: its runner, its job directory, its ready line.

``autodist.runtime.launch.coordinator`` sequences a job (launch, watch, finish);
the pieces here are what one node's start is made of, each a function of
that node alone::

    default_runner(node, spec)          LocalRunner (no ssh group) | SSHRunner
    stage_job_dir(runner, python, ...)  mkdir -m 0700 <workdir>; copy strategy.pb (+ staged files)
    await_ready(handles, timeout, ...)  until each node's script prints ``server.READY`` (bounded)
    single_node_job(spec, job_id)       a one-node job: no other process, its server in this one
"""
import os
import posixpath
import signal
import sys
import time

from autodist.errors import LaunchError
from autodist.runner.base import MAX_TAIL_LINES, run_for_output
from autodist.runner.srun import pick_launcher, srun_runner
from autodist.runtime.context import JobContext
from autodist.runtime.launch.server import READY, start_in_process
from autodist.spec.cluster import cpu_count_of

__all__ = ["default_runner", "runner_factory", "describe_exit", "host_port", "python_for", "stage_job_dir",
           "await_ready", "single_node_job", "STRATEGY_FILE"]

STRATEGY_FILE = "strategy.pb"


def default_runner(node, resource_spec, sink=None):
    """Local runner for a node without an ssh group, an SSH runner otherwise.

    Only the chief and loopback nodes may lack an ssh group (a spec rule).
    """
    from autodist.runner import LocalRunner, SSHRunner
    ssh = resource_spec.ssh_config_map.get(node.address)
    if ssh is None:
        return LocalRunner(name=node.address, sink=sink)
    return SSHRunner(node.address, ssh, sink=sink)


def runner_factory(launcher):
    """The runner factory of a launcher (``runner.srun.pick_launcher``): ``"ssh"`` (``default_runner``) or
    ``"srun"`` (``runner.srun.srun_runner``)."""
    return srun_runner if pick_launcher(launcher, {}) == "srun" else default_runner


def host_port(address, port):
    """``"host:port"``, the address bracketed when it is an IPv6 one."""
    return "[{}]:{}".format(address, port) if ":" in address else "{}:{}".format(address, port)


def describe_exit(code):
    """``'exited with code 137 (killed by SIGKILL)'``: the shell convention, spelled out."""
    text = "exited with code {}".format(code)
    if code is not None and 128 < code < 128 + 65 and code != 255:
        try:
            text += " (killed by {})".format(signal.Signals(code - 128).name)
        except ValueError:
            pass
    return text


def python_for(runner, python=None):
    """The interpreter a node runs: ``python`` if given, else this one locally and ``python3`` remotely."""
    from autodist.runner import LocalRunner
    if python:
        return python
    return sys.executable if isinstance(runner, LocalRunner) else "python3"


def stage_job_dir(address, runner, python, workdir, strategy_path, staged, timeout):
    """Make the job's directory on one node and copy the strategy (as ``STRATEGY_FILE``) and ``staged`` into it."""
    from autodist.runner.allocation import workdir_argv
    code, output = run_for_output(runner, workdir_argv(python, workdir), timeout)
    if code != 0:
        raise LaunchError("{}: cannot create the job directory {} (exit code {}): {}".format(
            address, workdir, code, output.strip()[-300:] or "no output"))
    runner.copy(strategy_path, posixpath.join(workdir, STRATEGY_FILE))
    for path in staged:
        runner.copy(path, posixpath.join(workdir, os.path.basename(path)))


def await_ready(handles, timeout, check):
    """Wait until the script of every node in ``handles`` has announced its server (``READY``).

    ``check`` runs between polls (the chief's held signals).
    """
    deadline = time.monotonic() + timeout
    for handle in handles.values():
        while READY not in handle.tail(MAX_TAIL_LINES):
            code = handle.poll()
            if code is not None:
                raise handle.failure("failed: its training script {} while starting its TensorFlow server".format(
                    describe_exit(code)))
            if time.monotonic() > deadline:
                raise handle.failure("failed: its training script did not start its TensorFlow server within "
                                     "{:.0f} s".format(timeout))
            check()
            time.sleep(0.1)


def single_node_job(resource_spec, job_id):
    """A one-node job with its server in this process: its JobContext."""
    from autodist.runner import free_port
    address = resource_spec.chief
    servers = {address: "localhost:{}".format(free_port())}
    context = JobContext(job_id=job_id, address=address, servers=servers, chief=address, strategy_path="")
    node = resource_spec.node_specs[0]
    start_in_process(context.cluster_spec(), 0, cpu_count_of(node), 0, node.threads, node.cores)
    return context
