"""Resource specs: the machines and devices a job runs on, read from YAML.

    nodes:
      - address: 10.0.0.1
        gpus: [0, 1]
        chief: true
      - address: 10.0.0.2
        gpus: [0, 1]
        ssh_config: conf
    ssh:
      conf:
        username: ubuntu
        key_file: ~/.ssh/id_ed25519

    spec = ResourceSpec("cluster.yml")
    spec.chief                  # '10.0.0.1'
    dict(spec.gpu_devices)      # {'10.0.0.1:GPU:0': DeviceSpec(...), ...}
    spec.node_cpu_devices       # {'10.0.0.1': ['10.0.0.1:CPU:0'], '10.0.0.2': [...]}
    spec.task_index("10.0.0.2") # 1
    spec.nodes                  # ['10.0.0.1', '10.0.0.2'] (AutoDist's); spec.node_specs: NodeSpec

The file is checked completely when it is loaded: a malformed spec raises one
:class:`~autodist.errors.ResourceSpecError` with a line ``<file>:<line>: <key path>:
<problem>`` per problem (all of the file's, most specific first; ``problems``
lists them), so nothing downstream ever sees a half-valid cluster. The schema
lives in ``autodist.spec.schema`` (``autodist spec schema`` prints it), the
cross-field rules in ``autodist.spec.rules``.

This module never imports TensorFlow: ``autodist spec validate`` runs on a
laptop without it, and planning code can read a spec cheaply.
"""
import enum
import getpass
import os
import re
import stat
import types
from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from autodist.spec.rules import address_problem, check_rules, is_loopback, spec_warnings, task_order
from autodist.spec.schema import SPEC
from autodist.spec.yaml_tree import Context, parse_text, tree_from_python
from autodist.errors import ResourceSpecError

__all__ = ["ResourceSpec", "DeviceSpec", "DeviceType", "NodeSpec", "SSHConfig", "DEVICE_TYPES"]

class DeviceType(enum.StrEnum):
    """The kind of a device, as in AutoDist: ``DeviceType.CPU`` or ``DeviceType.GPU``.

    A string enum: a member equals, hashes and formats as its name (``"GPU"``),
    so device names and TensorFlow device strings are built from it unchanged.
    """

    CPU = "CPU"
    GPU = "GPU"


DEVICE_TYPES = tuple(t.value for t in DeviceType)
_INDEX = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class DeviceSpec:
    """One device of the cluster, named ``"<address>:<CPU|GPU>:<index>"``.

    ``DeviceSpec("10.0.0.1", DeviceType.GPU, 1)`` and ``DeviceSpec("10.0.0.1",
    "GPU", 1)`` are the same device; ``device_type`` reads back as the
    :class:`DeviceType` member. Equality and hashing are by value. IPv6
    addresses contain colons, so names are parsed from the right:
    ``DeviceSpec.from_string("::1:GPU:0")`` is host ``::1``, GPU 0.
    """

    host_address: str
    device_type: DeviceType = DeviceType.CPU
    device_index: int = 0

    def __post_init__(self):
        problem = (address_problem(self.host_address) if isinstance(self.host_address, str)
                   else "expected a string address")
        if problem:
            raise ResourceSpecError("device host {!r}: {}".format(self.host_address, problem))
        if self.device_type not in DEVICE_TYPES:
            raise ResourceSpecError("device type must be 'CPU' or 'GPU' (or a DeviceType), got "
                                    "{!r}".format(self.device_type))
        object.__setattr__(self, "device_type", DeviceType(self.device_type))
        index = self.device_index
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ResourceSpecError("device index must be a non-negative integer, got {!r}".format(
                index))

    def __str__(self):
        return self.name_string()

    def __repr__(self):
        return "DeviceSpec(host_address={!r}, device_type={!r}, device_index={!r})".format(
            self.host_address, self.device_type.value, self.device_index)

    def name_string(self):
        return "{}:{}:{}".format(self.host_address, self.device_type.value, self.device_index)

    @classmethod
    def from_string(cls, name):
        """Parse a name made by :meth:`name_string`; anything else is a ResourceSpecError."""
        parts = name.rsplit(":", 2) if isinstance(name, str) else []
        if len(parts) != 3 or parts[1] not in DEVICE_TYPES or not _INDEX.fullmatch(parts[2]):
            raise ResourceSpecError(
                "malformed device name {!r}: expected '<address>:<CPU|GPU>:<index>', "
                "e.g. '10.0.0.1:GPU:0' or '::1:CPU:0'".format(name))
        return cls(parts[0], parts[1], int(parts[2]))


@dataclass(frozen=True)
class SSHConfig:
    """How to reach a node over SSH: one group under the spec's ``ssh`` key.

    Host keys are checked against ``known_hosts_file`` unless
    ``accept_new_host_keys`` is set, a deliberate opt-in for throw-away clusters.
    Paths are ``~``-expanded; ``shared_envs`` is a read-only mapping.
    """

    username: str
    port: int
    key_file: Optional[str]
    python_venv: str
    shared_envs: Mapping[str, str] = field(hash=False)
    accept_new_host_keys: bool
    known_hosts_file: str
    connect_timeout: float

    def __post_init__(self):
        object.__setattr__(self, "shared_envs", types.MappingProxyType(dict(self.shared_envs)))


@dataclass(frozen=True)
class NodeSpec:
    """One machine. ``cpus`` always contains 0; ``chief`` is True for the one chief
    (also for the only node of a single-node spec that does not say ``chief: true``)."""

    address: str
    gpus: Tuple[int, ...]
    cpus: Tuple[int, ...]
    chief: bool
    ssh_config: Optional[str]
    network_bandwidth: float
    threads: int = 0          # intra- and inter-op threads per TensorFlow process; 0: TensorFlow's choice
    cores: Tuple[int, ...] = ()   # CPU cores the node's processes are pinned to; (): not pinned


#: Larger spec files are refused: a real cluster's spec is a few KiB, and PyYAML
#: builds a Python object per value (a 12 MB file took 38 s and 1.3 GB).
MAX_SPEC_BYTES = 1024 * 1024


def _read_text(path):
    """The file's text: a regular file of at most MAX_SPEC_BYTES, never a device, FIFO or directory."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ResourceSpecError("{}; give the path of the resource spec's YAML file".format(kind), path=path)
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_SPEC_BYTES + 1)
    if len(raw) > MAX_SPEC_BYTES:
        raise ResourceSpecError("larger than {} MiB; a resource spec lists machines and devices and is a few KiB "
                                "(is this the right file?)".format(MAX_SPEC_BYTES // (1024 * 1024)), path=path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ResourceSpecError("not UTF-8 text (byte 0x{:02x} cannot be decoded)".format(
            raw[exc.start]), path=path, line=raw[:exc.start].count(b"\n") + 1) from None


class ResourceSpec:
    """A validated cluster description: nodes, their devices, the chief and SSH settings.

    Build it from a file (``ResourceSpec(path)``), from YAML text
    (:meth:`from_string`) or from plain data (:meth:`from_dict`); all three run
    the same checks. Device collections list each node's CPUs then its GPUs, in
    file order.
    """

    def __init__(self, resource_file):
        path = os.fspath(resource_file)
        self._load(parse_text(_read_text(path), path), path)

    @classmethod
    def from_string(cls, text, path="<string>"):
        spec = cls.__new__(cls)
        spec._load(parse_text(text, path), path)
        return spec

    @classmethod
    def from_dict(cls, data, path="<dict>"):
        """Check plain data shaped like the YAML (errors name ``path`` but no line)."""
        spec = cls.__new__(cls)
        spec._load(tree_from_python(data, path), path)
        return spec

    def _load(self, tree, path):
        ctx = Context(path)
        doc = SPEC.check(tree, "", ctx)
        ctx.raise_noted()
        chief = check_rules(doc, tree, ctx)
        self._path = path
        self._name = doc["name"]
        self._started_by = doc["started_by"]
        self._groups = {name: _ssh_config(fields, name, path) for name, fields in doc["ssh"].items()}
        self._template = doc["node_template"]   # a node's fields less address and chief, or None
        self._nodes = tuple(_node_spec(fields, i == chief) for i, fields in enumerate(doc["nodes"]))
        self._chief = self._nodes[chief].address
        self._devices = {}
        for node in self._nodes:
            for device_type, indices in (("CPU", node.cpus), ("GPU", node.gpus)):
                for index in indices:
                    device = DeviceSpec(node.address, device_type, index)
                    self._devices[device.name_string()] = device
        self._warnings = tuple(spec_warnings(doc, tree, ctx))
        self._ranks = {address: k for k, address in enumerate(task_order(n.address for n in self._nodes))}

    @property
    def path(self):
        return self._path

    @property
    def name(self):
        return self._name

    @property
    def node_template(self):
        """A listed host's settings for the hosts the spec does not list (``spec.template``), or None."""
        return None if self._template is None else _node_dict(NodeSpec(address="", chief=False, **self._template))

    @property
    def started_by(self):
        """"chief" (it launches the other nodes) or "platform" (every process joins: ``runtime.join``)."""
        return self._started_by

    @property
    def warnings(self):
        """What may fail at launch although the spec is valid (``<file>:<line>: <key>: <problem>`` each):
        a ``key_file`` missing here, a ``python_venv`` with shell syntax. ``autodist spec validate`` prints them."""
        return list(self._warnings)

    @property
    def chief(self):
        return self._chief

    @property
    def nodes(self):
        """The node addresses, in file order, as AutoDist's ``ResourceSpec.nodes``."""
        return [n.address for n in self._nodes]

    @property
    def node_specs(self):
        """The nodes as :class:`NodeSpec` (address, devices, chief, ssh group), in file order."""
        return list(self._nodes)

    @property
    def devices(self):
        """``(name, DeviceSpec)`` pairs of every device."""
        return self._devices.items()

    @property
    def cpu_devices(self):
        return self._devices_of_type("CPU")

    @property
    def gpu_devices(self):
        return self._devices_of_type("GPU")

    def _devices_of_type(self, device_type):
        return [(n, d) for n, d in self._devices.items() if d.device_type == device_type]

    @property
    def num_cpus(self):
        return len(self.cpu_devices)

    @property
    def num_gpus(self):
        return len(self.gpu_devices)

    @property
    def node_cpu_devices(self):
        """``{address: [CPU device names]}``; every node is present (each has CPU:0)."""
        return _by_node(self.cpu_devices)

    @property
    def node_gpu_devices(self):
        """``{address: [GPU device names]}``; nodes without GPUs are absent, as in AutoDist."""
        return _by_node(self.gpu_devices)

    @property
    def ssh_config_map(self):
        """``{address: SSHConfig or None}`` for every node, as in AutoDist: None for a node without an
        ssh group (the chief, a loopback node), which is started locally."""
        return {n.address: self._groups[n.ssh_config] if n.ssh_config else None for n in self._nodes}

    @property
    def ssh_group(self):
        """``{address: ssh group name or None}`` for every node, as in AutoDist."""
        return {n.address: n.ssh_config for n in self._nodes}

    @property
    def ssh_configs(self):
        """``{group name: SSHConfig}``, including groups no node uses."""
        return dict(self._groups)

    @property
    def remote_nodes(self):
        """The addresses of the nodes reached over SSH (those naming an ssh group), in file order."""
        return [n.address for n in self._nodes if n.ssh_config]

    @property
    def network_bandwidth(self):
        """``{address: Gbit/s}``."""
        return {n.address: n.network_bandwidth for n in self._nodes}

    def task_index(self, address):
        """Rank of ``address`` among the node addresses in sorted string order.

        It depends on the spec alone, so every process derives the same
        ``/job:worker/task:<k>`` for a node. Note the order is textual:
        ``10.0.0.10`` ranks before ``10.0.0.9``.
        """
        if address not in self._ranks:
            raise ResourceSpecError("{!r} is not a node of this spec (nodes: {})".format(
                address, ", ".join(n.address for n in self._nodes)), path=self._path)
        return self._ranks[address]

    @staticmethod
    def is_loopback(address):
        """True for 127.0.0.0/8, ::1 and 'localhost': nodes started locally, without SSH."""
        return is_loopback(address)

    def to_dict(self):
        """Plain data that :meth:`from_dict` turns back into an equal spec (paths expanded)."""
        data = {"nodes": [_node_dict(n) for n in self._nodes]}
        if self._name is not None:
            data = {"name": self._name, **data}
        if self._started_by != "chief":
            data["started_by"] = self._started_by
        if self._groups:
            data["ssh"] = {name: _ssh_dict(cfg) for name, cfg in self._groups.items()}
        if self._template is not None:
            data["node_template"] = self.node_template
        return data

    def __repr__(self):
        return "ResourceSpec({!r}: {} node(s), {} CPU, {} GPU, chief {})".format(
            self._path, len(self._nodes), self.num_cpus, self.num_gpus, self._chief)


def _ssh_config(fields, name, path):
    """The group's SSHConfig; without ``username``, the local user name, as ``ssh`` itself does."""
    if fields["username"] is not None:
        return SSHConfig(**fields)
    try:
        username = getpass.getuser()
    except (OSError, KeyError):
        raise ResourceSpecError("no username given and the local user name is unknown; set "
                                "'username'", path=path, key="ssh.{}.username".format(name)) from None
    return SSHConfig(**{**fields, "username": username})


def _node_spec(fields, chief):
    cpus = fields["cpus"] if 0 in fields["cpus"] else (0,) + fields["cpus"]
    return NodeSpec(**{**fields, "cpus": cpus, "chief": chief})


def _by_node(pairs):
    result = {}
    for name, device in pairs:
        result.setdefault(device.host_address, []).append(name)
    return result


def _node_dict(node):
    data = {"gpus": list(node.gpus), "cpus": list(node.cpus), "network_bandwidth": node.network_bandwidth}
    if node.address:   # a template has none
        data = {"address": node.address, "chief": node.chief, **data}
    if node.ssh_config is not None:
        data["ssh_config"] = node.ssh_config
    if node.threads:
        data["threads"] = node.threads
    if node.cores:
        data["cores"] = list(node.cores)
    return data


def _ssh_dict(cfg):
    data = {"username": cfg.username, "port": cfg.port, "python_venv": cfg.python_venv,
            "shared_envs": dict(cfg.shared_envs), "accept_new_host_keys": cfg.accept_new_host_keys,
            "known_hosts_file": cfg.known_hosts_file, "connect_timeout": cfg.connect_timeout}
    if cfg.key_file is not None:
        data["key_file"] = cfg.key_file
    return data
