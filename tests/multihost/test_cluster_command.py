"""``autodist cluster`` itself: what up makes, exec, link, a second up, down (also of a half-made cluster)."""
import os
import subprocess
import sys

import pytest

from autodist.runner.cluster import network, sshd
from autodist.spec.resource_spec import ResourceSpec

import tiers
from clustertools import Cluster, cannot_make_reason, cli

pytestmark = pytest.mark.cluster

CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], 22), timeout=3).close(); print('reached')"


@pytest.fixture
def bare():
    reason = cannot_make_reason()
    if reason:
        tiers.unavailable("cluster", reason)


def _in(cluster, node, *argv):
    return subprocess.run([sys.executable, "-m", "autodist", "cluster", "exec", "--name", cluster.name, str(node),
                           "--"] + list(argv), capture_output=True, text=True, timeout=60)


def test_up_exec_link_down_and_nothing_is_left(bare, tmp_path):
    cluster = Cluster(2, "200mbit", tmp_path).up()
    try:
        assert "cluster {!r} is up: 2 node(s)".format(cluster.name) in cluster.made
        for name in ("autodist-{}-0".format(cluster.name), "autodist-{}-sw".format(cluster.name), cluster.spec):
            assert name in cluster.made
        spec = ResourceSpec(cluster.spec)
        assert [n.address for n in spec.node_specs] == ["10.77.0.1", "10.77.0.2"] and spec.chief == "10.77.0.1"
        # node 1 has its own stack: lo and eth0 with its address, nothing else, no route out of the subnet
        addresses = _in(cluster, 1, "ip", "-o", "-4", "addr", "show").stdout
        assert sorted(line.split()[1] for line in addresses.splitlines()) == ["eth0", "lo"]
        assert "10.77.0.2/24" in addresses
        assert _in(cluster, 1, "ip", "route", "show").stdout.split()[0] == "10.77.0.0/24"
        assert "rate 200Mbit" in _in(cluster, 1, "tc", "qdisc", "show", "dev", "eth0").stdout
        assert _in(cluster, 0, sys.executable, "-c", CONNECT, "10.77.0.2").stdout.strip() == "reached"
        assert "link down" in cluster.link(1, "down")
        cut = _in(cluster, 0, sys.executable, "-c", CONNECT, "10.77.0.2")
        assert cut.returncode != 0 and "reached" not in cut.stdout
        cluster.link(1, "up")
        assert _in(cluster, 0, sys.executable, "-c", CONNECT, "10.77.0.2").stdout.strip() == "reached"
        assert "at 20 Mbit/s each way" in cluster.link(1, "rate", "20mbit")
        assert "rate 20Mbit" in _in(cluster, 1, "tc", "qdisc", "show", "dev", "eth0").stdout
        again = cli("up", "-n", "2", "--name", cluster.name, "-o", str(tmp_path / "other.yml"), check=False)
        assert again.returncode == 2 and "cluster {!r} exists".format(cluster.name) in again.stderr
        assert "autodist cluster down --name {}".format(cluster.name) in again.stderr
        assert not (tmp_path / "other.yml").exists()
        missing = _in(cluster, 5, "true")
        assert missing.returncode == 2 and "has nodes 0, 1" in missing.stderr
        # --name after NODE names the cluster (it ran `--name` in the default cluster before)
        after = subprocess.run([sys.executable, "-m", "autodist", "cluster", "exec", "0", "--name", cluster.name,
                                "--", "ip", "-o", "-4", "addr", "show", "eth0"], capture_output=True, text=True,
                               timeout=60)
        assert after.returncode == 0 and "10.77.0.1/24" in after.stdout, after.stderr
        # the spec up wrote is one `spec validate` has nothing to warn about (it warned of its python_venv)
        checked = subprocess.run([sys.executable, "-m", "autodist", "spec", "validate", cluster.spec],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0 and "warning" not in checked.stderr, checked.stderr
    finally:
        removed = cluster.down()
    assert "namespace autodist-{}-1".format(cluster.name) in removed and "spec " + cluster.spec in removed
    assert cluster.leftovers() == []
    assert "nothing to remove" in cluster.down()   # idempotent


def test_down_removes_a_cluster_whose_up_crashed_half_way(bare, tmp_path):
    """The state file, the switch, node 0 with its sshd and half of node 1: what a crash of up may leave."""
    cluster = Cluster(2, "1gbit", tmp_path)
    names = cluster.names
    try:
        os.makedirs(names.state_dir, mode=0o700)
        with open(names.state_file, "w") as f:
            f.write('{"name": "%s", "nodes": 2, "rate": 1000000000, "spec": "%s"}' % (cluster.name, cluster.spec))
        network.make_switch(names)
        network.add_node(names, 0, 10 ** 9)
        subprocess.run(["ip", "netns", "add", names.namespace(1)], check=True, timeout=30)
        sshd.make_keys(names, 2)
        assert sshd.start(names, 0) > 0
        assert len(cluster.leftovers()) >= 4   # three namespaces, the sshd, the files
    finally:
        removed = cluster.down()
    assert "sshd of node 0" in removed and "namespace autodist-{}-1".format(cluster.name) in removed
    assert cluster.leftovers() == []


def test_up_into_a_pipe_that_closes_keeps_the_cluster_and_a_missing_directory_is_refused_first(bare, tmp_path):
    cluster = Cluster(1, "1gbit", tmp_path)
    nowhere = subprocess.run([sys.executable, "-m", "autodist", "cluster", "up", "-n", "1", "--name", cluster.name,
                              "-o", str(tmp_path / "missing" / "c.yml")], capture_output=True, text=True, timeout=60)
    assert nowhere.returncode == 2 and "is not a directory" in nowhere.stderr and "nothing was made" in nowhere.stderr
    assert cluster.leftovers() == []   # refused before anything was made (it was built, then "cannot read")
    try:
        # `up ... | head -n 1`: the reader leaves after the first line (it exited 2, "[Errno 32] Broken pipe")
        piped = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" -m autodist cluster up -n 1 --name "$1" -o "$2" '
                                              '| head -n 1', sys.executable, cluster.name, cluster.spec],
                               capture_output=True, text=True, timeout=120)
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.startswith("cluster {!r}: making 1 node(s)".format(cluster.name))
        assert "Broken pipe" not in piped.stderr and "Traceback" not in piped.stderr
        assert os.path.exists(cluster.spec) and cluster.names.namespace(0) in network.namespaces(cluster.names)
    finally:
        cluster.down()
    assert cluster.leftovers() == []
