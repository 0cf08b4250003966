"""Every object ``autodist cluster`` makes, named in one place.

A cluster called ``NAME`` with N nodes is, on this machine::

    network namespace  autodist-NAME-sw     the switch: bridge br0, ports n0 .. n<N-1>, no address
    network namespace  autodist-NAME-<i>    node i: lo and eth0 = 10.77.0.<i+1>/24, peer of port n<i>
    qdisc tbf          eth0 in node i's namespace (its upload) and n<i> in the switch's (its download)
    sshd               in node i's namespace on 10.77.0.<i+1>:22, pid file, config, log, host key
    files              ~/.autodist/clusters/NAME/: state.json, the client key, authorized_keys,
                       known_hosts, one sshd_<i>.* set per node; and the resource spec (``-o``)
    --slurm            munged (its own key and socket) and slurmctld in node 0's namespace, slurmd_<i> in
                       node i's (Slurm node name = its address); slurm.conf, cgroup.conf, state and spool
                       directories, pid files and logs in the same directory
    --mpi              mpi_hostfile and openmpi-mca-params.conf (mpirun reaches the nodes over their sshd)

Interfaces live only inside the cluster's namespaces (none is ever created in
the machine's own namespace), so removing the namespaces removes every link,
bridge and qdisc, and clusters of different names never share a namespace, a
link or a switch (each has the same addresses 10.77.0.x, in namespaces of its
own: the spec's name, made afresh by every ``up``, tells clusters apart). The
subnet has no route anywhere else.
"""
import dataclasses
import os
import re

from autodist.errors import ArgumentError

__all__ = ["ClusterNames", "check_name", "DEFAULT_NAME", "SUBNET", "STATE_BASE", "MAX_NODES", "NAMESPACE_PREFIX"]

DEFAULT_NAME = "local"
NAMESPACE_PREFIX = "autodist-"
SUBNET = "10.77.0"           # node i is SUBNET.<i+1>/24
PREFIX_LENGTH = 24
MAX_NODES = 200
STATE_BASE = "~/.autodist/clusters"
SSH_PORT = 22
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,23}\Z")


def check_name(name):
    """``name`` if it can name a cluster (lower-case letters, digits and '-', at most 24), else ArgumentError."""
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith("-sw"):
        raise ArgumentError("--name {!r}: a cluster name is 1-24 lower-case letters, digits and '-', starting with a "
                            "letter or digit (and not ending in '-sw')".format(name))
    return name


@dataclasses.dataclass(frozen=True)
class ClusterNames:
    """The names of one cluster's objects (see the module docstring); ``base`` holds its files."""

    name: str = DEFAULT_NAME
    base: str = STATE_BASE

    def __post_init__(self):
        check_name(self.name)

    # -- network -----------------------------------------------------------------------
    @property
    def prefix(self):
        return "{}{}-".format(NAMESPACE_PREFIX, self.name)

    def namespace(self, index):
        return "{}{}".format(self.prefix, index)

    @property
    def switch(self):
        return self.prefix + "sw"

    bridge = "br0"       # in the switch's namespace
    node_link = "eth0"   # in each node's namespace

    @staticmethod
    def port(index):
        """Node ``index``'s port on the bridge (the switch's end of its veth pair)."""
        return "n{}".format(index)

    @staticmethod
    def address(index):
        return "{}.{}".format(SUBNET, index + 1)

    @staticmethod
    def cidr(index):
        return "{}.{}/{}".format(SUBNET, index + 1, PREFIX_LENGTH)

    ssh_port = SSH_PORT

    def index_of_namespace(self, namespace):
        """The node index of one of this cluster's namespaces, "sw" for the switch, None if not ours."""
        if not namespace.startswith(self.prefix):
            return None
        rest = namespace[len(self.prefix):]
        if rest == "sw":
            return rest
        return int(rest) if rest.isdigit() else None

    # -- files -------------------------------------------------------------------------
    @property
    def state_dir(self):
        return os.path.join(os.path.expanduser(self.base), self.name)

    def _file(self, name):
        return os.path.join(self.state_dir, name)

    @property
    def state_file(self):
        return self._file("state.json")

    @property
    def client_key(self):
        return self._file("client_ed25519")

    @property
    def authorized_keys(self):
        return self._file("authorized_keys")

    @property
    def known_hosts(self):
        return self._file("known_hosts")

    def host_key(self, index):
        return self._file("sshd_{}_host_ed25519".format(index))

    def sshd_config(self, index):
        return self._file("sshd_{}.conf".format(index))

    def sshd_pid(self, index):
        return self._file("sshd_{}.pid".format(index))

    def sshd_log(self, index):
        return self._file("sshd_{}.log".format(index))

    # -- Slurm and MPI (``--slurm``, ``--mpi``) ----------------------------------------------
    def slurm_node(self, index):
        """Node ``index``'s name in Slurm: its address (it resolves everywhere, no hosts file needed)."""
        return self.address(index)

    @property
    def slurm_conf(self):
        return self._file("slurm.conf")

    @property
    def cgroup_conf(self):   # Slurm reads it beside slurm.conf
        return self._file("cgroup.conf")

    @property
    def slurmctld_state(self):
        return self._file("slurmctld.state")

    def slurm_daemon_file(self, daemon, suffix):
        """``slurmctld.pid``, ``slurmd_10.77.0.2.log``: ``daemon`` is slurmctld or ``slurmd_<node name>``."""
        return self._file("{}.{}".format(daemon, suffix))

    def munge_file(self, suffix):
        """munged's ``key``, ``socket``, ``pid``, ``log`` and ``seed``."""
        return self._file("munge.{}".format(suffix))

    @property
    def mpi_hostfile(self):
        return self._file("mpi_hostfile")

    @property
    def mpi_params(self):
        return self._file("openmpi-mca-params.conf")
