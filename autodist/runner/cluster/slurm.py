"""A real Slurm cluster on the emulated hosts (``autodist cluster up --slurm``): Debian's slurm-wlm and munge.

    make(names, n)       munge.key; munged in node 0's namespace on the cluster's own socket; slurm.conf and
                         cgroup.conf; slurmctld in node 0's namespace on 10.77.0.1:6817; slurmd in every
                         node's namespace on its address, port 6818; waits until every node is idle
    environment(names)   {"SLURM_CONF": ...}: what sbatch, srun, squeue and scontrol need (``cluster exec``)
    stop(names, n)       SIGTERM to each daemon the pid files name, when that process is still ours

Each daemon lives in a node's network namespace, so ``down`` ends whatever
is left of them (and of the job steps slurmd started) with the namespaces'
processes; their state, spool directories and logs are files of the
cluster's directory. Nothing is shared with the machine or with another
cluster: munged has its own key and socket (``AuthInfo=socket=``), every
node's ports are its own network stack's, a Slurm node is named by its
address (it resolves in every namespace, no hosts file is written), and the
daemons run as the user who made the cluster (root), like the sshds.
Processes are tracked by process group (``proctrack/linuxproc``), not cgroups,
so nothing is made in the machine's cgroup tree.
"""
import getpass
import os
import signal
import socket
import time

from autodist.errors import ClusterError
from autodist.runner.cluster.network import run_tool

__all__ = ["make", "environment", "stop", "missing_reason", "BINARIES", "READY_TIMEOUT"]

BINARIES = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "munged": "/usr/sbin/munged",
            "sinfo": "/usr/bin/sinfo"}
READY_TIMEOUT = 90.0     # s for every slurmd to register with the controller
PARTITION = "cluster"
_CONF = """# made by autodist cluster up --name {name} --slurm
ClusterName=autodist-{name}
SlurmctldHost={controller}({address})
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctld_pid}
SlurmctldLogFile={ctld_log}
SlurmdPidFile={d_pid}
SlurmdLogFile={d_log}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MinJobAge=3600
JobRequeue=1
{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing_reason():
    """Why no Slurm cluster can be made here (a binary missing), or None."""
    missing = [path for path in BINARIES.values() if not os.access(path, os.X_OK)]
    if missing:
        return "{} not found: install slurm-wlm and munge (apt-get install slurm-wlm munge)".format(", ".join(missing))
    return None


def environment(names):
    return {"SLURM_CONF": names.slurm_conf}


def _write(path, data, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def _config(names, count):
    user = getpass.getuser()
    nodes = "\n".join("NodeName={} CPUs={} State=UNKNOWN".format(names.slurm_node(i), os.cpu_count() or 1)
                      for i in range(count))
    return _CONF.format(
        name=names.name, controller=socket.gethostname().split(".")[0], address=names.address(0),
        socket=names.munge_file("socket"), user=user, state=names.slurmctld_state,
        spool=names.slurm_daemon_file("slurmd_%n", "spool"), ctld_pid=names.slurm_daemon_file("slurmctld", "pid"),
        ctld_log=names.slurm_daemon_file("slurmctld", "log"), d_pid=names.slurm_daemon_file("slurmd_%n", "pid"),
        d_log=names.slurm_daemon_file("slurmd_%n", "log"), nodes=nodes, partition=PARTITION)


def _in_node(names, index, argv, what):
    run_tool(["ip", "netns", "exec", names.namespace(index)] + list(argv), "cluster {!r}: {}".format(names.name, what))


def make(names, count):
    """munged, slurm.conf, slurmctld and a slurmd per node (module docstring); waits until every node is idle."""
    reason = missing_reason()
    if reason:
        raise ClusterError("cluster {!r}: --slurm: {}".format(names.name, reason))
    _write(names.munge_file("key"), os.urandom(1024), 0o400)
    _in_node(names, 0, [BINARIES["munged"], "--force", "--socket=" + names.munge_file("socket"),
                        "--key-file=" + names.munge_file("key"), "--pid-file=" + names.munge_file("pid"),
                        "--log-file=" + names.munge_file("log"), "--seed-file=" + names.munge_file("seed")],
             "start munged")
    _write(names.slurm_conf, _config(names, count), 0o644)
    # slurmd reads cgroup.conf at its start even when no plugin uses cgroups, and its autodetection fails on a
    # machine with the v1 hierarchy under a tmpfs (this one); naming v1 lets it start, and nothing is made there
    _write(names.cgroup_conf, "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n", 0o644)
    os.makedirs(names.slurmctld_state, mode=0o700)
    _in_node(names, 0, [BINARIES["slurmctld"], "-f", names.slurm_conf], "start slurmctld")
    for index in range(count):
        os.makedirs(names.slurm_daemon_file("slurmd_" + names.slurm_node(index), "spool"), mode=0o700)
        _in_node(names, index, [BINARIES["slurmd"], "-f", names.slurm_conf, "-N", names.slurm_node(index)],
                 "start node {}'s slurmd".format(index))
    _await_idle(names, count)


def _states(names):
    """{node name: Slurm's state of it} as sinfo sees it from node 0."""
    code, out = run_tool(["ip", "netns", "exec", names.namespace(0), "env", "SLURM_CONF=" + names.slurm_conf,
                          BINARIES["sinfo"], "-h", "-N", "-o", "%N %t"], "ask slurmctld", timeout=15, check=False)
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2) if code == 0 else {}


def _await_idle(names, count, timeout=READY_TIMEOUT):
    wanted = [names.slurm_node(i) for i in range(count)]
    deadline = time.monotonic() + timeout
    while True:
        states = _states(names)
        waiting = [n for n in wanted if states.get(n) != "idle"]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise ClusterError("cluster {!r}: Slurm node(s) {} not idle within {:.0f} s ({}); see {}".format(
                names.name, ", ".join(waiting), timeout, ", ".join("{}: {}".format(n, states.get(n, "unknown"))
                                                                  for n in waiting),
                names.slurm_daemon_file("slurmd_" + waiting[0], "log")))
        time.sleep(0.5)


def _pid(path, conf):
    """The pid in ``path`` when that process still runs with ``conf`` on its command line (pids are reused)."""
    try:
        with open(path) as f:
            pid = int(f.read().split()[0])
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            return pid if conf.encode() in f.read() else None
    except (OSError, ValueError, IndexError):
        return None


def stop(names, count):
    """SIGTERM to the cluster's slurmd, slurmctld and munged (by their pid files); the names of those stopped."""
    daemons = [("slurmd of node {}".format(i), names.slurm_daemon_file("slurmd_" + names.slurm_node(i), "pid"),
                names.slurm_conf) for i in range(count)]
    daemons += [("slurmctld", names.slurm_daemon_file("slurmctld", "pid"), names.slurm_conf),
                ("munged", names.munge_file("pid"), names.munge_file("socket"))]
    stopped = []
    for what, path, conf in daemons:
        pid = _pid(path, conf)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                stopped.append(what)
            except ProcessLookupError:
                pass
    return stopped
