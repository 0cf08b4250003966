"""Emulated clusters for the multi-host tests, made and removed through ``autodist cluster``.

``Cluster(nodes, rate, directory).up()`` runs ``autodist cluster up`` under a
name of its own (``t<6 hex>``); ``exec_argv`` is what a ``jobtools.Chief``
runs to start a script inside node 0's namespace; ``spec_for(k)`` writes a
spec of the first k nodes (a pool of nodes shared by the tests of a module);
``link`` cuts, restores or reshapes a node's link; ``down`` removes it all and
``leftovers()`` lists what is still there, looked up by the cluster's name:
namespaces, links, processes, files.
"""
import os
import secrets
import shutil
import subprocess
import sys

import yaml

from autodist.runner.cluster import ClusterNames

TIMEOUT = 120.0


def cannot_make_reason():
    """Why no emulated cluster can be made here (not root, no ip/tc/sshd, namespaces refused), or None."""
    if os.geteuid() != 0:
        return "autodist cluster needs root (network namespaces); CI runs this tier as root"
    for tool in ("ip", "tc", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "{} not found: install iproute2 and openssh-client (scripts/test.sh does as root)".format(tool)
    if not os.access("/usr/sbin/sshd", os.X_OK):
        return "/usr/sbin/sshd not found: install openssh-server (scripts/test.sh does as root)"
    probe = "autodist-probe-{}".format(os.getpid())
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return "cannot make a network namespace here: {}".format(made.stderr.strip())
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def cli(*argv, check=True):
    """``autodist cluster ARGV`` in a child process: its CompletedProcess (stdout and stderr as text)."""
    done = subprocess.run([sys.executable, "-m", "autodist", "cluster"] + list(argv), capture_output=True, text=True,
                          timeout=TIMEOUT)
    if check and done.returncode != 0:
        raise AssertionError("autodist cluster {} failed ({}):\n{}{}".format(
            " ".join(argv), done.returncode, done.stdout, done.stderr))
    return done


def slurm_missing_reason():
    """Why ``autodist cluster up --slurm`` cannot run here (the tier's skip reason, named ``slurm``), or None."""
    from autodist.runner.cluster.slurm import missing_reason
    reason = missing_reason()
    return "slurm: {} (scripts/test.sh installs them as root)".format(reason) if reason else None


def mpi_missing_reason():
    """Why ``autodist cluster up --mpi`` cannot run here (the tier's skip reason, named ``mpi``), or None."""
    from autodist.runner.cluster.mpi import missing_reason
    reason = missing_reason()
    return "mpi: {} (scripts/test.sh installs it as root)".format(reason) if reason else None


class Cluster:
    def __init__(self, nodes, rate, directory, flags=()):
        self.nodes, self.rate, self.flags = nodes, rate, list(flags)
        self.name = "t" + secrets.token_hex(3)
        self.names = ClusterNames(self.name)
        self.directory = str(directory)
        self.spec = os.path.join(self.directory, "cluster.yml")

    def up(self):
        self.made = cli("up", "-n", str(self.nodes), "--rate", self.rate, "--name", self.name, "-o", self.spec,
                        *self.flags).stdout
        return self

    def address(self, index):
        return self.names.address(index)

    def exec_argv(self, argv, node=0):
        """What ``jobtools.Chief`` (``python ARGV``) runs: ``argv`` (after ``python``) inside ``node``'s namespace."""
        return ["-m", "autodist", "cluster", "exec", "--name", self.name, str(node), "--", sys.executable] + list(argv)

    def run(self, argv, node=0, timeout=TIMEOUT, **kwargs):
        """``argv`` (a command, not a Python script) inside ``node``'s namespace: its CompletedProcess."""
        return subprocess.run([sys.executable, "-m", "autodist", "cluster", "exec", "--name", self.name, str(node),
                               "--"] + list(argv), capture_output=True, text=True, timeout=timeout, **kwargs)

    def spec_for(self, count):
        """A spec of the cluster's first ``count`` nodes (node 0 the chief)."""
        path = os.path.join(self.directory, "nodes{}.yml".format(count))
        if not os.path.exists(path):
            with open(self.spec) as f:
                data = yaml.safe_load(f)
            data["nodes"] = data["nodes"][:count]
            if count == 1:
                data.pop("ssh", None)
            with open(path, "w") as f:
                yaml.safe_dump(data, f)
        return path

    def link(self, node, *action):
        return cli("link", "--name", self.name, str(node), *action).stdout

    def down(self):
        return cli("down", "--name", self.name).stdout

    def leftovers(self):
        """What of this cluster is still on the machine, named by the cluster's name (empty: nothing)."""
        left = []
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        left += ["namespace " + line.split()[0] for line in namespaces.splitlines() if line.startswith(self.names.prefix)]
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30).stdout
        left += ["link " + line for line in links.splitlines() if self.name in line]
        needle = self.names.state_dir.encode()   # daemons name it on their command line, jobs in SLURM_CONF...
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/{}/cmdline".format(entry), "rb") as f:
                    text = f.read()
                with open("/proc/{}/environ".format(entry), "rb") as f:
                    text += f.read()
                if entry.isdigit() and int(entry) != os.getpid() and needle in text:
                    left.append("process {}".format(entry))
            except OSError:
                continue
        left += ["file " + p for p in (self.names.state_dir, self.spec) if os.path.exists(p)]
        return left
