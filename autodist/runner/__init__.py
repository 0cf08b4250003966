"""The launch layer: run argv lists on the job's nodes, locally, over SSH or with Slurm's srun.

    runner = SSHRunner(address, spec.ssh_config_map[address])   # or LocalRunner()
    preflight([runner], local_versions())                       # all hosts, in parallel
    handle = runner.run(["python", "train.py"], env={...}, cwd=workdir)
    ...handle.poll() / handle.wait(5) / handle.terminate() / handle.failure()

Modules: ``shell`` (the only place that builds remote shell text), ``base``
(``Runner``, ``ProcessHandle``), ``local``, ``ssh`` (+ ``hostkeys``), ``srun``,
``preflight``, ``allocation`` (job ids, working directories, ports),
``frames`` (the reports a node sends inside its output), ``console``
(what of a node's output the chief's console shows) and ``node_log`` (a node's
log file on the chief: owner-only, best-effort).  Names are loaded on first use, so
importing this package does not import paramiko.
"""
import importlib

__all__ = [
    "Runner", "ProcessHandle", "CONNECTION_LOST", "run_for_output",
    "LocalRunner", "SSHRunner", "SrunRunner",
    "UnknownHostKeyError", "HostKeyChangedError",
    "preflight", "local_versions",
    "new_job_id", "job_workdir", "free_port", "free_ports",
]

_LAZY = {
    "Runner": "base", "ProcessHandle": "base", "CONNECTION_LOST": "base", "run_for_output": "base",
    "LocalRunner": "local", "SSHRunner": "ssh", "SrunRunner": "srun",
    "UnknownHostKeyError": "hostkeys", "HostKeyChangedError": "hostkeys",
    "preflight": "preflight", "local_versions": "preflight",
    "new_job_id": "allocation", "job_workdir": "allocation", "free_port": "allocation", "free_ports": "allocation",
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module 'autodist.runner' has no attribute '{}'".format(name))
    value = getattr(importlib.import_module("autodist.runner." + _LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
