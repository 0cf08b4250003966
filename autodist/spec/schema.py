"""The resource-spec schema: every key with its kind, one-line description and default.

A :class:`Record` lists :class:`Key` entries; a key's kind checks and converts
its value and reports problems at the value's line and key path (e.g.
``nodes[1].gpus[2]``). Checking a document (an ``autodist.spec.yaml_tree.Node``)
yields plain, normalized data::

    {"name": None,
     "nodes": [{"address": "10.0.0.1", "gpus": (0, 1), "cpus": (0,), "chief": False,
                "ssh_config": None, "network_bandwidth": 1.0, "threads": 0, "cores": ()}, ...],
     "ssh": {"conf": {"username": "ubuntu", "port": 22, ...}}}

Why a small hand-written checker rather than jsonschema: errors must carry the
YAML line of the offending value, and the schema doubles as the user-facing key
reference (``autodist spec schema``). A record, list or mapping notes the
problem of one entry in the context and goes on with the next, so a file with
several mistakes reports all of them, one line each (``Context.raise_noted``).
Cross-field rules (one chief, unique
addresses, ssh references...) run afterwards, in ``autodist.spec.rules``.
"""
import json
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Optional

from autodist.errors import ResourceSpecError
from autodist.spec.rules import address_problem, did_you_mean
from autodist.spec.yaml_tree import child_path, item_path, tree_from_python

__all__ = ["Key", "Record", "ListOf", "MapOf", "Scalar", "IndexList", "EnvMap", "REQUIRED",
           "SPEC", "NODE", "SSH_GROUP", "describe_schema",
           "MAX_DEVICES", "MAX_NODES"]


def _describe(value):
    """A short, single-line description of a wrong value for error messages."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return "{} ({})".format(names.get(type(value), "a " + type(value).__name__), text)


def _got(node):
    if node.kind == "map":
        return "a mapping"
    if node.kind == "seq":
        return "a list"
    return _describe(node.value)


def _require(node, kind, expected, key, ctx):
    """Raise "expected <expected>, got <what node is>" unless ``node`` is of ``kind`` ("map", "seq")."""
    if node.kind != kind:
        raise ctx.error("expected {}, got {}".format(expected, _got(node)), node.line, key)


# ---------------------------------------------------------------- schema kinds

@dataclass(frozen=True)
class Scalar:
    """A single value: ``accepts`` checks its type, ``rule`` its range, ``convert`` normalizes."""

    expected: str
    accepts: Callable[[object], bool]
    rule: Optional[Callable[[object], Optional[str]]] = None
    convert: Optional[Callable[[object], object]] = None
    text: bool = False   # wrong plain scalars get "quote it": YAML read `no` as false, `22` as 22

    def check(self, node, key, ctx):
        if node.kind != "scalar" or not self.accepts(node.value):
            hint = ""
            if node.kind == "scalar" and node.value is None:
                hint = "; give a value or remove the key"
            elif node.kind == "scalar" and self.text:
                hint = "; quote it if it is meant as text"
            raise ctx.error("expected {}, got {}{}".format(self.expected, _got(node), hint),
                            node.line, key)
        problem = self.rule(node.value) if self.rule else None
        if problem:
            raise ctx.error(problem, node.line, key)
        return self.convert(node.value) if self.convert else node.value


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(value):
    if not math.isfinite(value) or value <= 0:
        return "must be a positive number, got {}".format(value)
    return None


def _port(value):
    if not 1 <= value <= 65535:
        return "port must be between 1 and 65535, got {}".format(value)
    return None


def _non_negative(value):
    return None if value >= 0 else "must be an integer >= 0, got {}".format(value)


def _non_empty(value):
    return None if value.strip() else "must not be empty"


def _is_str(value):
    return isinstance(value, str)


STRING = Scalar("a string", _is_str, _non_empty, text=True)
TEXT = Scalar("a string", _is_str, text=True)
def _is_path(value):
    # PathLike too, for from_dict(..., key_file=tmp_path / "id").
    return isinstance(value, (str, os.PathLike))


def _expand(value):
    return os.path.expanduser(os.fspath(value))


def _non_empty_path(value):
    return _non_empty(os.fspath(value))


PATH = Scalar("a file path", _is_path, _non_empty_path, _expand, text=True)
BOOL = Scalar("true or false", lambda v: isinstance(v, bool))
PORT = Scalar("an integer port", _is_int, _port)
POSITIVE = Scalar("a number", _is_number, _positive, float)
COUNT = Scalar("an integer", _is_int, _non_negative)
ADDRESS = Scalar("an address (IPv4, IPv6 or hostname)", _is_str, address_problem, text=True)


#: The longest device list and node list a spec may have (bounded work for any file).
MAX_DEVICES = 1024
MAX_NODES = 4096


def _at_most(node, most, what, key, ctx):
    if len(node.value) > most:
        raise ctx.error("{} {} listed; at most {} are allowed".format(len(node.value), what, most), node.line, key)


class IndexList:
    """A list of at most MAX_DEVICES distinct non-negative integers (device or core indices), as a tuple."""

    def __init__(self, what="device"):
        self.what = what
        self.expected = "a list of {} indices such as [0, 1]".format(what)

    def check(self, node, key, ctx):
        _require(node, "seq", self.expected, key, ctx)
        _at_most(node, MAX_DEVICES, "devices", key, ctx)
        seen = {}
        for i, item in enumerate(node.value):
            where = item_path(key, i)
            if item.kind != "scalar" or not _is_int(item.value) or item.value < 0:
                raise ctx.error("expected a non-negative integer {} index, got {}".format(self.what, _got(item)),
                                item.line, where)
            if item.value in seen:
                raise ctx.error("duplicate {} index {} (also {}[{}])".format(
                    self.what, item.value, key, seen[item.value]), item.line, where)
            seen[item.value] = i
        return tuple(seen)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class EnvMap:
    """Environment variables: NAME -> string (integers are accepted and turned into text)."""

    expected = "a mapping of environment variable names to strings"

    def check(self, node, key, ctx):
        _require(node, "map", self.expected, key, ctx)
        env = {}
        for entry in node.value:
            where = child_path(key, entry.key)
            if not isinstance(entry.key, str) or not _ENV_NAME.match(entry.key):
                raise ctx.error("not a valid environment variable name (letters, digits, '_')",
                                entry.line, where)
            value = entry.node
            if value.kind != "scalar" or not (isinstance(value.value, str) or _is_int(value.value)):
                raise ctx.error("expected a string, got {}; quote it".format(_got(value)),
                                value.line, where)
            env[entry.key] = str(value.value)
        return env


@dataclass(frozen=True)
class ListOf:
    """A non-empty list of at most ``most`` items, each checked by ``item``."""

    item: object
    expected: str
    most: int = MAX_NODES

    def check(self, node, key, ctx):
        _require(node, "seq", self.expected, key, ctx)
        if not node.value:
            raise ctx.error("must list at least one entry", node.line, key)
        _at_most(node, self.most, "entries", key, ctx)
        return [_noting(self.item, item, item_path(key, i), ctx) for i, item in enumerate(node.value)]


@dataclass(frozen=True)
class MapOf:
    """Named entries (e.g. ssh groups): string name -> item."""

    item: object
    expected: str

    def check(self, node, key, ctx):
        _require(node, "map", self.expected, key, ctx)
        result = {}
        for entry in node.value:
            if not isinstance(entry.key, str) or not entry.key.strip():
                raise ctx.error("a name must be a non-empty string, got " + _describe(entry.key),
                                entry.line, child_path(key, entry.key))
            result[entry.key] = _noting(self.item, entry.node, child_path(key, entry.key), ctx)
        return result


def _noting(kind, node, key, ctx):
    """``kind.check(...)``, noting a problem in ``ctx`` (result None) so its siblings are checked too."""
    try:
        return kind.check(node, key, ctx)
    except ResourceSpecError as error:
        ctx.note(error)
        return None


REQUIRED = object()
_MISSPELT = object()   # a key the file gives misspelt (reported as unknown, not as missing)


@dataclass(frozen=True)
class Key:
    """One key of a record. ``default`` is REQUIRED, None (optional, no value) or a raw value
    that is checked and converted exactly like a value from the file."""

    name: str
    kind: object
    description: str
    default: object = REQUIRED


@dataclass(frozen=True)
class Record:
    """A mapping with a fixed set of keys; unknown keys are errors with a did-you-mean."""

    expected: str
    keys: tuple

    def check(self, node, key, ctx):
        _require(node, "map", self.expected, key, ctx)
        known = {k.name: k for k in self.keys}
        given = {}
        for entry in node.value:
            if not isinstance(entry.key, str):
                ctx.note(ctx.error("keys must be strings, got " + _describe(entry.key),
                                   entry.line, child_path(key, entry.key)))
            elif entry.key not in known:
                ctx.note(ctx.error(_unknown(entry.key, known), entry.line,
                                   child_path(key, entry.key)))
                given.setdefault(did_you_mean(entry.key, known), _MISSPELT)
            else:
                given[entry.key] = entry.node
        result = {}
        for spec in self.keys:
            if given.get(spec.name) is _MISSPELT:
                continue   # "unknown key (did you mean ...)" said it; "missing" would repeat it
            try:
                result[spec.name] = self._value(spec, given, node, key, ctx)
            except ResourceSpecError as error:   # keep going: every problem of the file at once
                ctx.note(error)
        return result

    @staticmethod
    def _value(spec, given, node, key, ctx):
        where = child_path(key, spec.name)
        if spec.name in given:
            return spec.kind.check(given[spec.name], where, ctx)
        if spec.default is REQUIRED:
            raise ctx.error("missing required key ({})".format(spec.description), node.line, where)
        if spec.default is None:
            return None
        return spec.kind.check(tree_from_python(spec.default), where, ctx)


def _unknown(name, known):
    close = did_you_mean(name, known)
    if close:
        return "unknown key (did you mean {!r}?)".format(close)
    return "unknown key (allowed: {})".format(", ".join(known))


# ---------------------------------------------------------------- the schema

SSH_GROUP = Record("an ssh group (a mapping of connection settings)", (
    Key("username", STRING, "user to log in as on the node; without it, the local user name "
        "(as ssh does)", None),
    Key("port", PORT, "port of the node's sshd", 22),
    Key("key_file", PATH, "private key file for the login; '~' is expanded", None),
    Key("python_venv", TEXT, "shell prefix run before python, e.g. 'source ~/venv/bin/activate'",
        ""),
    Key("shared_envs", EnvMap(), "environment variables set for the remote processes", {}),
    Key("accept_new_host_keys", BOOL,
        "trust unknown host keys on first contact; off: verify against known_hosts", False),
    Key("known_hosts_file", PATH, "known_hosts file host keys are verified against",
        "~/.ssh/known_hosts"),
    Key("connect_timeout", POSITIVE, "seconds to wait for an SSH connection", 10),
))

NODE = Record("a node (a mapping with at least 'address')", (
    Key("address", ADDRESS, "IPv4 or IPv6 address or hostname of the node"),
    Key("gpus", IndexList(), "indices of the GPUs to use on the node", []),
    Key("cpus", IndexList(), "indices of the CPU devices to use; CPU:0 is always included", [0]),
    Key("chief", BOOL, "the node that runs the user's script; exactly one with several nodes",
        False),
    Key("ssh_config", STRING, "name of the group under 'ssh' used to reach the node", None),
    Key("network_bandwidth", POSITIVE, "network bandwidth of the node in Gbit/s", 1),
    Key("threads", COUNT, "intra- and inter-op threads of each TensorFlow process on the node; 0: "
        "TensorFlow's choice (TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, else one per core)", 0),
    Key("cores", IndexList("core"), "CPU cores (as numbered by the node's OS) every autodist process on the "
        "node is pinned to, all its threads; []: not pinned", []),
))

#: A node without an address: what a host the spec does not list takes when an elastic job's discovery finds it.
NODE_TEMPLATE = Record("a node template (a node's settings without 'address' and 'chief')",
                       tuple(k for k in NODE.keys if k.name not in ("address", "chief")))


def _started_by(value):
    return None if value in ("chief", "platform") else "must be 'chief' or 'platform', got {!r}".format(value)


STARTED_BY = Scalar("'chief' or 'platform'", _is_str, _started_by, text=True)

SPEC = Record("a mapping with a 'nodes' list", (
    Key("name", STRING, "a label for the cluster", None),
    Key("started_by", STARTED_BY, "who starts the nodes' processes: 'chief' (it launches the others over SSH "
        "or srun) or 'platform' (Kubernetes, srun --ntasks, mpirun: every process joins, no ssh groups; "
        "docs/kubernetes.md)", "chief"),
    Key("nodes", ListOf(NODE, "a list of nodes"), "the machines of the cluster"),
    Key("ssh", MapOf(SSH_GROUP, "a mapping of ssh group names to settings"),
        "named SSH settings that nodes refer to with 'ssh_config'", {}),
    Key("node_template", NODE_TEMPLATE, "the settings of a host an elastic job's discovery script finds that "
        "'nodes' does not list (docs/elastic.md); without it such a host is left out", None),
))


def describe_schema():
    """Lines documenting every key, e.g. ``nodes[].gpus   default []   indices of the GPUs...``."""
    def walk(record, prefix):
        for key in record.keys:
            kind = key.kind
            shown = prefix + key.name
            if isinstance(kind, ListOf):
                shown += "[]"
            elif isinstance(kind, MapOf):
                shown += ".<name>"
            if key.default is REQUIRED:
                default = "required"
            elif key.default is None:
                default = "optional"
            else:
                default = "default " + json.dumps(key.default)   # YAML spelling: false, []
            yield "{:32} {:30} {}".format(shown, default, key.description)
            if isinstance(getattr(kind, "item", None), Record):
                yield from walk(kind.item, shown + ".")
            elif isinstance(kind, Record):
                yield from walk(kind, shown + ".")

    return list(walk(SPEC, ""))
