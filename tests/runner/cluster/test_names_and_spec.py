"""The cluster's names, rates and resource spec: pure functions, no namespace is made."""
import os
import shlex
import subprocess
import sys

import pytest

from autodist.errors import ArgumentError
from autodist.runner.cluster import ClusterNames, format_rate, parse_rate
from autodist.runner.cluster.specfile import is_ours, spec_data, write_spec
from autodist.spec.resource_spec import ResourceSpec


@pytest.mark.parametrize("text,bits", [("1gbit", 10 ** 9), ("200mbit", 2 * 10 ** 8), ("2.5Gbit", 25 * 10 ** 8),
                                       ("500kbit", 5 * 10 ** 5), ("100m", 10 ** 8), ("64000", 64000)])
def test_rates_in_tc_notation(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text,says", [("1gbps", "bytes per second"), ("fast", "bits per second"),
                                       ("0mbit", "positive"), ("1000bit", "at least 8kbit"),
                                       ("99999tbit", "at most 100 Gbit/s")])
def test_bad_rates_say_what_is_expected(text, says):
    with pytest.raises(ArgumentError, match=says):
        parse_rate(text)


def test_rates_for_people():
    assert [format_rate(r) for r in (10 ** 9, 2 * 10 ** 8, 25 * 10 ** 6, 5 * 10 ** 5)] == [
        "1 Gbit/s", "200 Mbit/s", "25 Mbit/s", "500 kbit/s"]


def test_every_object_is_named_by_the_cluster_and_lives_in_its_namespaces(tmp_path):
    names = ClusterNames("ci-1", base=str(tmp_path))
    assert [names.namespace(i) for i in range(2)] == ["autodist-ci-1-0", "autodist-ci-1-1"]
    assert names.switch == "autodist-ci-1-sw"
    assert [names.address(i) for i in range(3)] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert names.cidr(1) == "10.77.0.2/24"
    assert all(len(n) <= 15 for n in (names.bridge, names.node_link, names.port(199)))   # interface names
    files = [names.state_file, names.client_key, names.known_hosts, names.authorized_keys, names.sshd_config(0),
             names.sshd_pid(0), names.sshd_log(0), names.host_key(0)]
    assert all(os.path.dirname(f) == str(tmp_path / "ci-1") for f in files) and len(set(files)) == len(files)
    assert [names.index_of_namespace(ns) for ns in ("autodist-ci-1-3", "autodist-ci-1-sw", "autodist-ci-10-3",
                                                     "autodist-ci-1-x")] == [3, "sw", None, None]


@pytest.mark.parametrize("name", ["", "Upper", "-lead", "a b", "x" * 25, "ends-sw", "dots.no"])
def test_bad_cluster_names_are_refused(name):
    with pytest.raises(ArgumentError, match="--name"):
        ClusterNames(name)


def test_spec_reaches_the_other_nodes_over_ssh_with_this_python(tmp_path):
    names = ClusterNames("ci", base=str(tmp_path))
    data = spec_data(names, 3, 2 * 10 ** 8, cores=((0,), (1,), (0,)), threads=1, python="/opt/py env/bin/python3",
                     environ={"PYTHONPATH": "/src/autodist"})
    path = write_spec(str(tmp_path / "cluster.yml"), names, data)
    spec = ResourceSpec(path)
    assert spec.chief == "10.77.0.1"
    assert [n.address for n in spec.node_specs] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert [n.network_bandwidth for n in spec.node_specs] == [0.2] * 3
    assert [tuple(n.cores) for n in spec.node_specs] == [(0,), (1,), (0,)]
    group = spec.ssh_config_map["10.77.0.2"]
    assert spec.ssh_config_map["10.77.0.1"] is None and spec.remote_nodes == ["10.77.0.2", "10.77.0.3"]
    assert (group.port, group.key_file, group.known_hosts_file) == (22, names.client_key, names.known_hosts)
    assert dict(group.shared_envs) == {"PYTHONPATH": "/src/autodist"}
    # the prefix puts the interpreter's directory first on PATH, quoted once for the remote shell
    shown = subprocess.run(["sh", "-c", group.python_venv + ' && printf %s "$PATH"'], capture_output=True,
                           text=True, check=True).stdout
    assert shown.startswith("/opt/py env/bin:")
    assert is_ours(path, names) and not is_ours(path, ClusterNames("other"))
    with pytest.raises(FileExistsError):   # never overwritten
        write_spec(path, names, data)


def test_spec_without_pythonpath_has_no_shared_envs(tmp_path):
    data = spec_data(ClusterNames("ci"), 2, 10 ** 9, python=sys.executable, environ={})
    assert "shared_envs" not in data["ssh"]["cluster"]
    assert shlex.split(data["ssh"]["cluster"]["python_venv"])[0] == "export"


def test_the_spec_up_writes_has_nothing_to_warn_about(tmp_path):
    names = ClusterNames("ci", base=str(tmp_path))
    os.makedirs(names.state_dir)
    open(names.client_key, "w").close()   # up makes it before the spec
    path = write_spec(str(tmp_path / "cluster.yml"), names, spec_data(names, 2, 10 ** 9, python=sys.executable))
    assert ResourceSpec(path).warnings == []   # it warned: python_venv 'export PATH=...:"$PATH"' is shell syntax


def test_every_up_names_its_spec_afresh_and_the_calibration_cache_tells_them_apart():
    # every cluster has the addresses 10.77.0.x: a calibration of one must not serve another, or a later one
    from autodist.strategies.cost.calibration import spec_key
    specs = [ResourceSpec.from_dict(spec_data(ClusterNames(name), 2, 10 ** 9, environ={}, identity=identity))
             for name, identity in (("a", "0123abcd"), ("a", "4567ef01"), ("b", "0123abcd"))]
    assert specs[0].name == "cluster-a-0123abcd"
    assert len({spec_key(s) for s in specs}) == 3
