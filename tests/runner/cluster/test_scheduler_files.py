"""``autodist cluster up --slurm --mpi``: the files it writes, all inside the cluster's directory (no daemon here).

The daemons themselves run in tests/multihost/test_multihost_slurm.py and test_multihost_mpi.py.
"""
import os

import pytest

import tiers

from autodist.runner.cluster import ClusterNames
from autodist.runner.cluster import mpi, slurm


def test_slurm_conf_names_every_node_by_its_address_and_keeps_every_path_in_the_clusters_directory(tmp_path):
    names = ClusterNames("ci-2", base=str(tmp_path))
    conf = slurm._config(names, 3)
    lines = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line and not line.startswith("#")
                 and not line.startswith(("NodeName", "PartitionName")))
    assert lines["SlurmctldHost"].endswith("(10.77.0.1)") and lines["AuthInfo"] == "socket=" + names.munge_file("socket")
    assert lines["ProctrackType"] == "proctrack/linuxproc" and lines["TaskPlugin"] == "task/none"   # no cgroups made
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmctldLogFile", "SlurmdPidFile",
                "SlurmdLogFile"):
        assert lines[key].startswith(names.state_dir + os.sep), key
    nodes = [line.split()[0] for line in conf.splitlines() if line.startswith("NodeName=")]
    assert nodes == ["NodeName=10.77.0.1", "NodeName=10.77.0.2", "NodeName=10.77.0.3"]
    assert slurm.environment(names) == {"SLURM_CONF": os.path.join(names.state_dir, "slurm.conf")}


def test_mpiruns_hostfile_and_remote_shell_are_the_clusters(tmp_path):
    reason = mpi.missing_reason()
    if reason:
        tiers.unavailable("mpi", "mpi: " + reason)
    names = ClusterNames("ci-3", base=str(tmp_path))
    os.makedirs(names.state_dir)
    mpi.make(names, 2)
    with open(names.mpi_hostfile) as f:
        assert f.read() == "10.77.0.1 slots=1\n10.77.0.2 slots=1\n"
    with open(names.mpi_params) as f:
        params = dict(line.split(" = ", 1) for line in f.read().splitlines() if " = " in line)
    assert params["orte_default_hostfile"] == names.mpi_hostfile
    assert "-i {} -o UserKnownHostsFile={}".format(names.client_key, names.known_hosts) in params["plm_rsh_agent"]
    assert params["hwloc_base_binding_policy"] == "none"   # the hosts share this machine's cores
    assert mpi.environment(names) == {"OMPI_MCA_mca_param_files": names.mpi_params}
