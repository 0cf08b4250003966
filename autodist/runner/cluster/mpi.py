"""Open MPI on the emulated hosts (``autodist cluster up --mpi``): mpirun reaches every node over its sshd.

    make(names, n)       mpi_hostfile (every node's address, one slot each) and openmpi-mca-params.conf:
                         ssh with the cluster's client key and known_hosts as mpirun's remote shell, the
                         hostfile as its default, no binding of ranks to cores (the nodes share this
                         machine's cores); give the ranks your PATH with ``mpirun -x PATH`` (the login
                         shell of an sshd has the system's)
    environment(names)   {"OMPI_MCA_mca_param_files": ...}: what ``autodist cluster exec`` gives mpirun

No daemon: mpirun in node 0 (``autodist cluster exec 0 -- mpirun ...``) starts
Open MPI's orted on every other node through that node's sshd, as on real
machines, and the ranks reach each other over the cluster's links.
"""
import os
import shlex
import shutil

from autodist.errors import ClusterError

__all__ = ["make", "environment", "missing_reason"]


def missing_reason():
    """Why mpirun cannot run here, or None."""
    if shutil.which("mpirun") is None or shutil.which("orted") is None:
        return "mpirun or orted not found: install openmpi-bin (apt-get install openmpi-bin)"
    return None


def environment(names):
    return {"OMPI_MCA_mca_param_files": names.mpi_params}


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def make(names, count):
    """The hostfile and the MCA parameters (module docstring)."""
    reason = missing_reason()
    if reason:
        raise ClusterError("cluster {!r}: --mpi: {}".format(names.name, reason))
    _write(names.mpi_hostfile, "".join("{} slots=1\n".format(names.address(i)) for i in range(count)))
    ssh = ["ssh", "-i", names.client_key, "-o", "UserKnownHostsFile=" + names.known_hosts,
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(names.ssh_port)]
    _write(names.mpi_params, "# made by autodist cluster up --name {} --mpi\n"
                             "plm_rsh_agent = {}\n"
                             "orte_default_hostfile = {}\n"
                             "hwloc_base_binding_policy = none\n".format(names.name, " ".join(map(shlex.quote, ssh)),
                                                                         names.mpi_hostfile))
