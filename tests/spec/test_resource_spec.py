"""ResourceSpec, DeviceSpec, NodeSpec and SSHConfig on well-formed specs."""
import dataclasses
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import yaml

from autodist.spec import schema
from autodist.errors import ResourceSpecError
from autodist.spec.resource_spec import DeviceSpec, NodeSpec, ResourceSpec, SSHConfig

SPECS = pathlib.Path(__file__).resolve().parents[2] / "resource_specs"
SHIPPED = ["single_node_cpu.yml", "single_node_2gpus.yml", "two_nodes.yml", "heterogeneous.yml",
           "loopback_two_nodes.yml", "loopback_three_nodes.yml"]


def spec_of(text, path="spec.yml"):
    return ResourceSpec.from_string(textwrap.dedent(text), path=path)


# ---------------------------------------------------------------- shipped specs

def test_every_shipped_spec_is_listed():
    assert sorted(p.name for p in SPECS.glob("*.yml")) == sorted(SHIPPED)


def test_threads_per_node_default_to_tensorflows_choice():
    spec = spec_of("""\
        nodes:
          - address: 127.0.0.1
            chief: true
            threads: 2
          - address: 127.0.0.2
        """)
    assert [n.threads for n in spec.node_specs] == [2, 0]
    assert ResourceSpec.from_dict(spec.to_dict()).node_specs == spec.node_specs
    assert "threads" not in spec.to_dict()["nodes"][1], "the default is left out"


def test_cores_per_node_default_to_no_pinning():
    spec = spec_of("""\
        nodes:
          - address: 127.0.0.1
            chief: true
            cores: [1, 0]
          - address: 127.0.0.2
        """)
    assert [n.cores for n in spec.node_specs] == [(1, 0), ()]
    assert ResourceSpec.from_dict(spec.to_dict()).node_specs == spec.node_specs
    assert "cores" not in spec.to_dict()["nodes"][1], "the default is left out"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_spec_validates_and_explains_itself(name):
    path = SPECS / name
    assert path.read_text(encoding="utf-8").startswith("# ")
    spec = ResourceSpec(path)
    assert spec.path == str(path)
    assert spec.chief in spec.network_bandwidth
    assert sum(n.chief for n in spec.node_specs) == 1


def test_single_node_cpu():
    spec = ResourceSpec(SPECS / "single_node_cpu.yml")
    assert spec.chief == "127.0.0.1"
    assert [name for name, _ in spec.devices] == ["127.0.0.1:CPU:0"]
    assert (spec.num_cpus, spec.num_gpus) == (1, 0)
    assert spec.node_gpu_devices == {}
    assert spec.ssh_config_map == {"127.0.0.1": None} and spec.ssh_group == {"127.0.0.1": None}
    assert spec.ssh_configs == {} and spec.remote_nodes == []


def test_single_node_two_gpus():
    spec = ResourceSpec(SPECS / "single_node_2gpus.yml")
    assert dict(spec.gpu_devices) == {
        "127.0.0.1:GPU:0": DeviceSpec("127.0.0.1", "GPU", 0),
        "127.0.0.1:GPU:1": DeviceSpec("127.0.0.1", "GPU", 1)}
    assert spec.node_cpu_devices == {"127.0.0.1": ["127.0.0.1:CPU:0"]}


def test_two_nodes_properties():
    spec = ResourceSpec(SPECS / "two_nodes.yml")
    assert spec.name == "two-gpu-nodes"
    assert spec.chief == "192.168.1.10"
    assert [n.address for n in spec.node_specs] == ["192.168.1.10", "192.168.1.11"]
    assert (spec.num_cpus, spec.num_gpus) == (2, 8)
    assert spec.node_gpu_devices["192.168.1.11"] == ["192.168.1.11:GPU:{}".format(i) for i in range(4)]
    assert spec.network_bandwidth == {"192.168.1.10": 25.0, "192.168.1.11": 25.0}
    group = spec.ssh_configs["gpu_cluster"]
    assert spec.ssh_config_map == {"192.168.1.10": None, "192.168.1.11": group}
    assert spec.ssh_group == {"192.168.1.10": None, "192.168.1.11": "gpu_cluster"}
    assert spec.remote_nodes == ["192.168.1.11"]
    assert group.username == "ubuntu" and group.port == 22
    assert group.key_file == os.path.expanduser("~/.ssh/id_ed25519")
    assert group.python_venv == "source ~/venvs/autodist/bin/activate"
    assert dict(group.shared_envs) == {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
    assert group.accept_new_host_keys is False


def test_heterogeneous_nodes():
    spec = ResourceSpec(SPECS / "heterogeneous.yml")
    assert [len(n.gpus) for n in spec.node_specs] == [4, 2, 0]
    assert "cpu-box.lab.example" not in spec.node_gpu_devices
    assert spec.node_cpu_devices["cpu-box.lab.example"] == [
        "cpu-box.lab.example:CPU:0", "cpu-box.lab.example:CPU:1"]
    assert spec.network_bandwidth == {"10.10.0.1": 100.0, "10.10.0.2": 10.0,
                                      "cpu-box.lab.example": 1.0}
    cpu_group = spec.ssh_config_map["cpu-box.lab.example"]
    assert (cpu_group.username, cpu_group.port, cpu_group.connect_timeout) == ("research", 2222, 30.0)
    assert dict(cpu_group.shared_envs) == {"OMP_NUM_THREADS": "4"}
    assert spec.ssh_config_map["10.10.0.2"].port == 22


def test_loopback_two_nodes_needs_no_ssh():
    spec = ResourceSpec(SPECS / "loopback_two_nodes.yml")
    assert [n.address for n in spec.node_specs] == ["127.0.0.1", "127.0.0.2"]
    assert all(spec.is_loopback(n.address) for n in spec.node_specs)
    assert spec.remote_nodes == [] and spec.num_gpus == 0
    assert [spec.task_index(a) for a in ("127.0.0.1", "127.0.0.2")] == [0, 1]


def test_loopback_three_nodes_template_is_filled_in_with_from_dict(tmp_path):
    # The documented recipe of the SSH tests: load, replace the sshd settings, build.
    data = yaml.safe_load((SPECS / "loopback_three_nodes.yml").read_text(encoding="utf-8"))
    key = tmp_path / "client_key"
    data["ssh"]["loopback"].update(username="tester", port=42022, key_file=key,
                                   known_hosts_file=tmp_path / "known_hosts")
    spec = ResourceSpec.from_dict(data, path="loopback-sshd")
    assert spec.chief == "127.0.0.1"
    assert spec.remote_nodes == ["127.0.0.2", "127.0.0.3"] and spec.ssh_config_map["127.0.0.1"] is None
    config = spec.ssh_config_map["127.0.0.3"]
    assert (config.username, config.port, config.key_file) == ("tester", 42022, str(key))
    assert config.known_hosts_file == str(tmp_path / "known_hosts")
    assert config.accept_new_host_keys is False


# ---------------------------------------------------------------- defaults and shapes

def spec_with_group(group):
    """A chief and a node reached through ssh group ``conf``, whose YAML lines are ``group``."""
    return spec_of("""\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.2
            ssh_config: conf
        ssh:
          conf:
        """ + textwrap.indent(textwrap.dedent(group), " " * 4))


def test_defaults_of_nodes_and_ssh_groups(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = spec_with_group("username: ubuntu\n")
    node = spec.node_specs[1]
    assert node == NodeSpec(address="10.0.0.2", gpus=(), cpus=(0,), chief=False,
                            ssh_config="conf", network_bandwidth=1.0)
    assert isinstance(node.network_bandwidth, float)
    assert spec.name is None
    assert spec.ssh_configs["conf"] == SSHConfig(
        username="ubuntu", port=22, key_file=None, python_venv="", shared_envs={},
        accept_new_host_keys=False, known_hosts_file=str(tmp_path / ".ssh" / "known_hosts"),
        connect_timeout=10.0)


def test_tilde_is_expanded_in_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = spec_of("""\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            key_file: ~/keys/id_rsa
            known_hosts_file: ~/hosts
            python_venv: source ~/venv/bin/activate
        """)
    group = spec.ssh_configs["conf"]
    assert group.key_file == str(tmp_path / "keys" / "id_rsa")
    assert group.known_hosts_file == str(tmp_path / "hosts")
    # python_venv is a shell prefix, run remotely: its '~' is the remote shell's business.
    assert group.python_venv == "source ~/venv/bin/activate"


def test_every_node_has_cpu_zero():
    spec = spec_of("""\
        nodes:
          - address: 10.0.0.1
            gpus: [1, 0]
            chief: true
          - address: 10.0.0.2
            cpus: [2, 3]
            ssh_config: c
        ssh: {c: {username: u}}
        """)
    assert spec.node_specs[1].cpus == (0, 2, 3)
    assert spec.node_cpu_devices == {"10.0.0.1": ["10.0.0.1:CPU:0"],
                                     "10.0.0.2": ["10.0.0.2:CPU:0", "10.0.0.2:CPU:2",
                                                  "10.0.0.2:CPU:3"]}
    # Devices run node by node in file order, CPUs first, GPUs in the order listed.
    assert [name for name, _ in spec.devices] == [
        "10.0.0.1:CPU:0", "10.0.0.1:GPU:1", "10.0.0.1:GPU:0",
        "10.0.0.2:CPU:0", "10.0.0.2:CPU:2", "10.0.0.2:CPU:3"]
    assert all(name == device.name_string() for name, device in spec.devices)


@pytest.mark.parametrize("chief_line", ["", "    chief: true\n", "    chief: false\n"])
def test_a_single_node_is_the_chief(chief_line):
    spec = ResourceSpec.from_string("nodes:\n  - address: gpu-box\n" + chief_line)
    assert spec.chief == "gpu-box"
    assert spec.node_specs[0].chief is True


def test_ipv6_nodes_and_device_names():
    spec = spec_of("""\
        nodes:
          - address: "fd00::1"
            gpus: [0]
            chief: true
          - address: "fd00::2"
            gpus: [0, 1]
            ssh_config: c
        ssh: {c: {username: u}}
        """)
    assert spec.node_gpu_devices["fd00::2"] == ["fd00::2:GPU:0", "fd00::2:GPU:1"]
    for name, device in spec.devices:
        assert DeviceSpec.from_string(name) == device


def test_merge_keys_share_node_settings():
    spec = spec_of("""\
        nodes:
          - &gpu_node
            address: 10.0.0.1
            gpus: [0, 1]
            network_bandwidth: 40
            chief: true
          - <<: *gpu_node
            address: 10.0.0.2
            chief: false
            ssh_config: c
        ssh: {c: {username: u}}
        """)
    second = spec.node_specs[1]
    assert (second.address, second.gpus, second.network_bandwidth, second.chief) == (
        "10.0.0.2", (0, 1), 40.0, False)


def test_task_index_is_the_rank_in_sorted_string_order():
    spec = spec_of("""\
        nodes:
          - address: 10.0.0.9
            chief: true
          - address: 10.0.0.10
            ssh_config: c
          - address: 10.0.0.2
            ssh_config: c
        ssh: {c: {username: u}}
        """)
    assert [spec.task_index(n.address) for n in spec.node_specs] == [2, 0, 1]
    with pytest.raises(ResourceSpecError, match="'10.0.0.3' is not a node of this spec"):
        spec.task_index("10.0.0.3")


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1", True), ("127.0.0.3", True), ("127.255.0.1", True), ("::1", True),
    ("localhost", True), ("LocalHost", True), ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False), ("128.0.0.1", False), ("fd00::1", False), ("gpu-box", False),
])
def test_is_loopback(address, expected):
    assert ResourceSpec.is_loopback(address) is expected


def test_to_dict_round_trips():
    spec = ResourceSpec(SPECS / "heterogeneous.yml")
    again = ResourceSpec.from_dict(spec.to_dict())
    assert again.node_specs == spec.node_specs
    assert again.ssh_configs == spec.ssh_configs and again.ssh_group == spec.ssh_group
    assert again.name == spec.name and again.path == "<dict>"


def test_from_string_matches_the_file(tmp_path):
    text = (SPECS / "two_nodes.yml").read_text(encoding="utf-8")
    assert ResourceSpec.from_string(text).node_specs == ResourceSpec(SPECS / "two_nodes.yml").node_specs


def test_models_are_frozen():
    spec = ResourceSpec(SPECS / "two_nodes.yml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.node_specs[0].address = "10.9.9.9"
    group = spec.ssh_configs["gpu_cluster"]
    with pytest.raises(TypeError):
        group.shared_envs["EXTRA"] = "1"
    spec.node_specs.clear()   # a copy: the spec keeps its nodes
    assert len(spec.node_specs) == 2


def test_schema_keys_are_the_model_fields():
    def names(record):
        return [key.name for key in record.keys]
    assert names(schema.NODE) == [f.name for f in dataclasses.fields(NodeSpec)]
    assert names(schema.SSH_GROUP) == [f.name for f in dataclasses.fields(SSHConfig)]
    assert all(key.description for r in (schema.SPEC, schema.NODE,
                                          schema.SSH_GROUP) for key in r.keys)


def test_repr_summarizes():
    spec = ResourceSpec(SPECS / "two_nodes.yml")
    assert repr(spec).endswith("2 node(s), 2 CPU, 8 GPU, chief 192.168.1.10)")


# ---------------------------------------------------------------- DeviceSpec

@pytest.mark.parametrize("name, parts", [
    ("10.0.0.1:GPU:0", ("10.0.0.1", "GPU", 0)),
    ("gpu-box.example:CPU:12", ("gpu-box.example", "CPU", 12)),
    ("::1:GPU:0", ("::1", "GPU", 0)),
    ("fe80::1%eth0:CPU:3", ("fe80::1%eth0", "CPU", 3)),
    ("2001:db8::7:GPU:7", ("2001:db8::7", "GPU", 7)),
])
def test_device_name_round_trip(name, parts):
    device = DeviceSpec.from_string(name)
    assert (device.host_address, device.device_type, device.device_index) == parts
    assert device.name_string() == name
    assert DeviceSpec(*parts) == device and hash(DeviceSpec(*parts)) == hash(device)


@pytest.mark.parametrize("name", [
    "", "10.0.0.1", "10.0.0.1:GPU", ":GPU:0", "10.0.0.1:TPU:0", "10.0.0.1:gpu:0",
    "10.0.0.1:GPU:-1", "10.0.0.1:GPU:01", "10.0.0.1:GPU:x", "bad host:GPU:0", None,
])
def test_malformed_device_names(name):
    with pytest.raises(ResourceSpecError) as info:
        DeviceSpec.from_string(name)
    assert isinstance(info.value, ValueError)
    assert repr(name) in str(info.value) or "device host" in str(info.value)


@pytest.mark.parametrize("args, fragment", [
    (("10.0.0.1", "TPU", 0), "device type must be 'CPU' or 'GPU'"),
    (("10.0.0.1", "GPU", -1), "device index must be a non-negative integer"),
    (("10.0.0.1", "GPU", True), "device index must be a non-negative integer"),
    (("10.0.0.1:22", "GPU", 0), "an address carries no port"),
])
def test_device_spec_checks_its_fields(args, fragment):
    with pytest.raises(ResourceSpecError, match=fragment):
        DeviceSpec(*args)


def test_device_spec_equality_hash_and_repr():
    a, b = DeviceSpec("10.0.0.1", "GPU", 0), DeviceSpec("10.0.0.1", "GPU", 0)
    assert a == b and len({a, b, DeviceSpec("10.0.0.1", "GPU", 1)}) == 2
    assert a != DeviceSpec("10.0.0.1", "CPU", 0)
    assert repr(a) == "DeviceSpec(host_address='10.0.0.1', device_type='GPU', device_index=0)"


def test_resource_spec_module_does_not_import_tensorflow():
    code = ("import sys, autodist.spec.resource_spec as r; "
            "r.ResourceSpec(sys.argv[1]); print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(SPECS / "two_nodes.yml")],
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- AutoDist 0.7's API

def test_nodes_are_the_node_addresses_as_in_autodist():
    spec = ResourceSpec(SPECS / "heterogeneous.yml")
    assert spec.nodes == [n.address for n in spec.node_specs]
    assert all(isinstance(address, str) for address in spec.nodes)
    assert spec.chief in spec.nodes


def test_device_type_enum_as_in_autodist():
    from autodist.resource_spec import DeviceSpec as PublicDeviceSpec, DeviceType
    assert PublicDeviceSpec is DeviceSpec and [t.name for t in DeviceType] == ["CPU", "GPU"]
    default = DeviceSpec(host_address="0.0.0.0")
    assert (default.device_type, default.device_index) == (DeviceType.CPU, 0)
    assert default.name_string() == str(default) == "0.0.0.0:CPU:0"
    gpu = DeviceSpec(host_address="localhost", device_type=DeviceType.GPU, device_index=2)
    assert gpu.device_type is DeviceType.GPU and gpu == DeviceSpec("localhost", "GPU", 2)
    assert hash(gpu) == hash(DeviceSpec("localhost", "GPU", 2))
    assert DeviceSpec.from_string("localhost:GPU:2").device_type is DeviceType.GPU
    for name in ("10.0.0.1:GPU:1", "gpu-box.lab:CPU:0", "::1:GPU:1"):
        device = DeviceSpec.from_string(name)
        assert device.name_string() == str(device) == name
        assert DeviceSpec.from_string(str(device)) == device
    ipv6 = DeviceSpec.from_string("::1:GPU:1")
    assert (ipv6.host_address, ipv6.device_type, ipv6.device_index) == ("::1", DeviceType.GPU, 1)
    spec = ResourceSpec(SPECS / "two_nodes.yml")
    assert {d.device_type for _, d in spec.gpu_devices} == {DeviceType.GPU}


def test_ssh_group_without_username_is_the_local_user(monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "localperson")
    spec = spec_with_group("port: 2222\n")
    assert spec.ssh_config_map["10.0.0.2"].username == "localperson"
    assert spec.ssh_configs["conf"].port == 2222
