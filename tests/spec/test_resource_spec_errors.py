"""Malformed resource specs: each gives one ResourceSpecError naming file, line and key.

A file with several problems reports all of them, one line each (the last tests).

Every case is a small spec written to ``spec.yml``; the test checks the
exception type, ``path``/``line``/``key`` attributes, the message prefix
``spec.yml:<line>: <key>: `` and a fragment of the problem text.
"""
import textwrap

import pytest

from autodist.errors import AutoDistError, ResourceSpecError
from autodist.spec.resource_spec import ResourceSpec


def case(case_id, text, line, key, fragment):
    return pytest.param(textwrap.dedent(text), line, key, fragment, id=case_id)


CASES = [
    # --- the file as a whole
    case("empty-file", "", 1, None, "the file is empty"),
    case("only-comments", "# nothing here\n\n# still nothing\n", 1, None, "the file is empty"),
    case("yaml-unclosed-bracket", """\
        nodes:
          - address: 10.0.0.1
            gpus: [0, 1
        """, 4, None, "invalid YAML: expected ',' or ']'"),
    case("yaml-bad-indentation", """\
        nodes:
          - address: 10.0.0.1
           gpus: [0]
        """, 3, None, "invalid YAML"),
    case("yaml-tab-indentation", "nodes:\n\t- address: 10.0.0.1\n", 2, None, "invalid YAML"),
    case("yaml-two-documents", """\
        nodes:
          - address: 10.0.0.1
        ---
        nodes:
          - address: 10.0.0.2
        """, 3, None, "invalid YAML: expected a single document in the stream, but found another"),
    case("top-level-list", """\
        - address: 10.0.0.1
        - address: 10.0.0.2
        """, 1, None, "expected a mapping with a 'nodes' list, got a list"),
    case("top-level-scalar", "just some text\n", 1, None, "got a string"),
    case("duplicate-key", """\
        nodes:
          - address: 10.0.0.1
            gpus: [0]
            gpus: [1]
        """, 4, "nodes[0].gpus", "duplicate key (first given on line 3)"),
    case("unsupported-tag", """\
        nodes:
          - address: !!python/object:os.system 10.0.0.1
        """, 2, "nodes[0].address", "unsupported YAML value"),
    case("recursive-alias", """\
        nodes: &loop
          - *loop
        """, 1, "nodes[0]", "an alias refers to a node that contains it"),
    # --- top-level keys
    case("unknown-top-level-key", """\
        node:
          - address: 10.0.0.1
        """, 1, "node", "unknown key (did you mean 'nodes'?)"),
    case("missing-nodes", """\
        name: lab
        ssh:
          conf:
            username: ubuntu
        """, 1, "nodes", "missing required key"),
    case("empty-nodes", "nodes: []\n", 1, "nodes", "must list at least one entry"),
    case("nodes-is-mapping", """\
        nodes:
          address: 10.0.0.1
        """, 2, "nodes", "expected a list of nodes, got a mapping"),
    case("name-not-string", """\
        name: [a, b]
        nodes:
          - address: 10.0.0.1
        """, 1, "name", "expected a string, got a list"),
    # --- node keys and types
    case("node-is-string", """\
        nodes:
          - 10.0.0.1
        """, 2, "nodes[0]", "expected a node"),
    case("unknown-node-key-gpu", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.2
            ssh_config: conf
            gpu: [0]
        ssh:
          conf:
            username: ubuntu
        """, 6, "nodes[1].gpu", "unknown key (did you mean 'gpus'?)"),
    case("unknown-node-key-no-match", """\
        nodes:
          - address: 10.0.0.1
            colour: red
        """, 3, "nodes[0].colour", "unknown key (allowed: address, gpus, cpus, chief"),
    case("node-key-not-string", """\
        nodes:
          - address: 10.0.0.1
            1: one
        """, 3, "nodes[0].1", "keys must be strings, got an integer"),
    case("missing-address", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - gpus: [0]
            ssh_config: conf
        """, 4, "nodes[1].address", "missing required key"),
    case("address-integer", """\
        nodes:
          - address: 17
        """, 2, "nodes[0].address", "expected an address (IPv4, IPv6 or hostname), got an integer (17); quote it"),
    case("address-null", """\
        nodes:
          - address:
        """, 2, "nodes[0].address", "got null; give a value or remove the key"),
    case("address-bad-ipv4", """\
        nodes:
          - address: 256.1.1.1
        """, 2, "nodes[0].address", "not a valid IPv4 address"),
    case("address-with-port", """\
        nodes:
          - address: 10.0.0.1:2222
        """, 2, "nodes[0].address", "an address carries no port"),
    case("address-bad-hostname", """\
        nodes:
          - address: gpu_box!
        """, 2, "nodes[0].address", "not a valid IPv4/IPv6 address or hostname"),
    case("address-bad-ipv6", """\
        nodes:
          - address: "fe80:::1"
        """, 2, "nodes[0].address", "not a valid IPv6 address"),
    case("address-cidr", """\
        nodes:
          - address: 10.0.0.0/24
        """, 2, "nodes[0].address", "got a network"),
    case("gpus-not-list", """\
        nodes:
          - address: 10.0.0.1
            gpus: 2
        """, 3, "nodes[0].gpus", "expected a list of device indices such as [0, 1], got an integer"),
    case("gpus-string-item-deep", """\
        nodes:
          - address: 10.0.0.1
            gpus:
              - 0
              - 1
              - two
        """, 6, "nodes[0].gpus[2]", "expected a non-negative integer device index, got a string"),
    case("gpus-negative", """\
        nodes:
          - address: 10.0.0.1
            gpus: [0, -1]
        """, 3, "nodes[0].gpus[1]", "non-negative integer device index, got an integer (-1)"),
    case("gpus-boolean", """\
        nodes:
          - address: 10.0.0.1
            gpus: [true]
        """, 3, "nodes[0].gpus[0]", "got a boolean"),
    case("gpus-duplicate", """\
        nodes:
          - address: 10.0.0.1
            gpus: [0, 1, 0]
        """, 3, "nodes[0].gpus[2]", "duplicate device index 0 (also nodes[0].gpus[0])"),
    case("cpus-duplicate-multiline", """\
        nodes:
          - address: 10.0.0.1
            cpus:
              - 1
              - 1
        """, 5, "nodes[0].cpus[1]", "duplicate device index 1"),
    case("chief-quoted-string", """\
        nodes:
          - address: 10.0.0.1
            chief: "yes"
        """, 3, "nodes[0].chief", "expected true or false, got a string"),
    case("bandwidth-zero", """\
        nodes:
          - address: 10.0.0.1
            network_bandwidth: 0
        """, 3, "nodes[0].network_bandwidth", "must be a positive number"),
    case("bandwidth-negative", """\
        nodes:
          - address: 10.0.0.1
            network_bandwidth: -2.5
        """, 3, "nodes[0].network_bandwidth", "must be a positive number, got -2.5"),
    case("bandwidth-infinite", """\
        nodes:
          - address: 10.0.0.1
            network_bandwidth: .inf
        """, 3, "nodes[0].network_bandwidth", "must be a positive number, got inf"),
    case("threads-negative", """\
        nodes:
          - address: 10.0.0.1
            threads: -1
        """, 3, "nodes[0].threads", "must be an integer >= 0, got -1"),
    case("cores-duplicate", """\
        nodes:
          - address: 10.0.0.1
            cores: [1, 1]
        """, 3, "nodes[0].cores[1]", "duplicate core index 1 (also nodes[0].cores[0])"),
    case("cores-negative", """\
        nodes:
          - address: 10.0.0.1
            cores: [-1]
        """, 3, "nodes[0].cores[0]", "expected a non-negative integer core index, got"),
    case("threads-float", """\
        nodes:
          - address: 10.0.0.1
            threads: 1.5
        """, 3, "nodes[0].threads", "expected an integer, got a number (1.5)"),
    case("bandwidth-string", """\
        nodes:
          - address: 10.0.0.1
            network_bandwidth: 10Gbit
        """, 3, "nodes[0].network_bandwidth", "expected a number, got a string"),
    case("ssh-config-list", """\
        nodes:
          - address: 10.0.0.1
            ssh_config: [conf]
        """, 3, "nodes[0].ssh_config", "expected a string, got a list"),
    # --- cross-field rules
    case("no-chief", """\
        nodes:
          - address: 127.0.0.1
          - address: 127.0.0.2
        """, 1, "nodes", "none of the 2 nodes has 'chief: true'"),
    case("two-chiefs", """\
        nodes:
          - address: 127.0.0.1
            chief: true
          - address: 127.0.0.2
            chief: true
        """, 5, "nodes[1].chief", "several chiefs: nodes[0] on line 2 is already the chief"),
    case("duplicate-address", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.1
            ssh_config: conf
        ssh:
          conf:
            username: ubuntu
        """, 4, "nodes[1].address", "duplicate address '10.0.0.1' (already used by nodes[0] on line 2)"),
    case("duplicate-loopback-address", """\
        nodes:
          - address: 127.0.0.1
            chief: true
          - address: 127.0.0.2
          - address: 127.0.0.2
        """, 5, "nodes[2].address", "duplicate address '127.0.0.2'"),
    case("duplicate-ipv6-spellings", """\
        nodes:
          - address: "fd00::1"
            chief: true
          - address: "fd00:0:0::1"
            ssh_config: conf
        ssh:
          conf:
            username: ubuntu
        """, 4, "nodes[1].address", "duplicate address 'fd00:0:0::1'"),
    case("remote-node-without-ssh-config", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.2
            gpus: [0]
        """, 4, "nodes[1].ssh_config", "is neither the chief nor a loopback address"),
    case("ssh-config-names-no-group", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.2
            ssh_config: cnof
        ssh:
          conf:
            username: ubuntu
        """, 5, "nodes[1].ssh_config", "no ssh group named 'cnof' (did you mean 'conf'?)"),
    case("ssh-config-without-ssh-section", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 10.0.0.2
            ssh_config: conf
        """, 5, "nodes[1].ssh_config", "the spec has no 'ssh' section"),
    case("loopback-mixed-with-remote", """\
        nodes:
          - address: 10.0.0.1
            chief: true
          - address: 127.0.0.2
        """, 4, "nodes[1].address", "loopback address '127.0.0.2' mixed with non-loopback"),
    # --- ssh groups
    case("ssh-not-mapping", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          - username: ubuntu
        """, 4, "ssh", "expected a mapping of ssh group names to settings, got a list"),
    case("ssh-group-not-mapping", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf: ubuntu@10.0.0.2
        """, 4, "ssh.conf", "expected an ssh group"),
    case("ssh-unknown-key-user", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            user: ubuntu
        """, 5, "ssh.conf.user", "unknown key (did you mean 'username'?)"),
    case("ssh-port-word-without-username", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            port: ssh
        """, 5, "ssh.conf.port", "expected an integer port, got a string ('ssh')"),
    case("ssh-username-boolean", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: no
        """, 5, "ssh.conf.username", "got a boolean (False); quote it"),
    case("ssh-port-zero", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            port: 0
        """, 6, "ssh.conf.port", "port must be between 1 and 65535, got 0"),
    case("ssh-port-too-large", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            port: 70000
        """, 6, "ssh.conf.port", "port must be between 1 and 65535, got 70000"),
    case("ssh-port-quoted", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            port: "22"
        """, 6, "ssh.conf.port", "expected an integer port, got a string"),
    case("ssh-key-file-empty", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            key_file: ""
        """, 6, "ssh.conf.key_file", "must not be empty"),
    case("ssh-shared-envs-list", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            shared_envs: [A=1]
        """, 6, "ssh.conf.shared_envs", "expected a mapping of environment variable names"),
    case("ssh-shared-envs-bad-name", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            shared_envs:
              CUDA_HOME: /usr/local/cuda
              2BAD: x
        """, 8, "ssh.conf.shared_envs.2BAD", "not a valid environment variable name"),
    case("ssh-shared-envs-boolean-value", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            shared_envs:
              TF_FORCE_GPU_ALLOW_GROWTH: true
        """, 7, "ssh.conf.shared_envs.TF_FORCE_GPU_ALLOW_GROWTH", "expected a string, got a boolean"),
    case("ssh-accept-new-host-keys-string", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            accept_new_host_keys: "true"
        """, 6, "ssh.conf.accept_new_host_keys", "expected true or false"),
    case("ssh-connect-timeout-zero", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            connect_timeout: 0
        """, 6, "ssh.conf.connect_timeout", "must be a positive number"),
    case("ssh-known-hosts-file-integer", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          conf:
            username: ubuntu
            known_hosts_file: 42
        """, 6, "ssh.conf.known_hosts_file", "expected a file path, got an integer (42); quote it"),
    case("node-template-address", """\
        nodes:
          - address: 10.0.0.1
        node_template:
          cpus: [0, 1]
          address: 10.0.0.2
        """, 5, "node_template.address", "unknown key (allowed: gpus, cpus, ssh_config"),
    case("node-template-unknown-group", """\
        nodes:
          - address: 10.0.0.1
        ssh:
          cloud: {username: ubuntu}
        node_template:
          ssh_config: clod
        """, 6, "node_template.ssh_config", "no ssh group named 'clod' (groups: cloud)"),
]


@pytest.mark.parametrize("text, line, key, fragment", CASES)
def test_malformed_spec_names_file_line_and_key(tmp_path, text, line, key, fragment):
    path = tmp_path / "spec.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec(path)
    exc = info.value
    assert isinstance(exc, ValueError) and isinstance(exc, AutoDistError)
    assert (exc.path, exc.line, exc.key) == (str(path), line, key)
    prefix = "{}:{}: ".format(path, line) + ("{}: ".format(key) if key else "")
    message = str(exc)
    assert message.startswith(prefix), message
    assert fragment in message[len(prefix):], message
    assert "\n" not in message


def test_at_least_thirty_distinct_cases():
    texts = [param.values[0] for param in CASES]
    assert len(set(texts)) == len(texts) >= 30


def test_non_utf8_file_reports_its_line(tmp_path):
    path = tmp_path / "spec.yml"
    path.write_bytes(b"nodes:\n  - address: caf\xe9\n")
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec(path)
    assert (info.value.path, info.value.line) == (str(path), 2)
    assert "not UTF-8 text (byte 0xe9" in str(info.value)


def test_control_character_reports_its_line(tmp_path):
    path = tmp_path / "spec.yml"
    path.write_text("nodes:\n  - address: 10.0.0.1\n    gpus: [0]\x07\n", encoding="utf-8")
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec(path)
    assert info.value.line == 3
    assert "special character #x0007" in str(info.value)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        ResourceSpec(tmp_path / "absent.yml")


def test_from_dict_errors_name_the_path_and_key_without_line():
    data = {"nodes": [{"address": "10.0.0.1", "chief": True}, {"address": "10.0.0.2", "gpu": [0]}]}
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec.from_dict(data, path="tf_config")
    assert str(info.value) == "tf_config: nodes[1].gpu: unknown key (did you mean 'gpus'?)"
    assert info.value.line is None


def test_from_dict_rejects_non_string_keys_and_self_reference():
    with pytest.raises(ResourceSpecError, match=r"<dict>: nodes\[0\]\.3: keys must be strings"):
        ResourceSpec.from_dict({"nodes": [{"address": "10.0.0.1", 3: "x"}]})
    loop = {"nodes": []}
    loop["nodes"].append(loop)
    with pytest.raises(ResourceSpecError, match="contains itself"):
        ResourceSpec.from_dict(loop)


def test_from_string_uses_the_given_path():
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec.from_string("nodes:\n  - address: 10.0.0.1\n    gpus: 1\n", path="inline.yml")
    assert str(info.value).startswith("inline.yml:3: nodes[0].gpus: expected a list")


# ---------------------------------------------------------------- several problems at once

def _load_errors(tmp_path, text):
    path = tmp_path / "spec.yml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec(path)
    return path, info.value


@pytest.mark.parametrize("key, value, expected", [
    ("port", "ssh", "expected an integer port, got a string ('ssh')"),
    ("key_file", "[a, b]", "expected a file path, got a list"),
    ("python_venv", "[a]", "expected a string, got a list"),
    ("shared_envs", "[A=1]", "expected a mapping of environment variable names to strings, got a list"),
])
def test_wrong_type_is_reported_even_when_a_key_is_missing(tmp_path, key, value, expected):
    # Node 0 lacks its address, and the ssh group has a wrong type: the type is named as such.
    path, exc = _load_errors(tmp_path, """\
        nodes:
          - gpus: [0]
            chief: true
        ssh:
          conf:
            {}: {}
        """.format(key, value))
    lines = str(exc).splitlines()
    assert lines == [
        "{}:6: ssh.conf.{}: {}".format(path, key, expected),
        "{}:2: nodes[0].address: missing required key (IPv4 or IPv6 address or hostname of the node)"
        .format(path)]
    assert (exc.line, exc.key) == (6, "ssh.conf." + key)
    assert [p.key for p in exc.problems] == ["ssh.conf." + key, "nodes[0].address"]


def test_every_problem_of_a_file_is_reported_at_once_most_specific_first(tmp_path):
    path, exc = _load_errors(tmp_path, """\
        nodes:
          - address: 10.0.0.1
            gpu: [0]
            chief: maybe
          - gpus: [x]
        ssh:
          conf:
            port: 0
        """)
    assert str(exc).splitlines() == [
        "{}:4: nodes[0].chief: expected true or false, got a string ('maybe')".format(path),
        "{}:5: nodes[1].gpus[0]: expected a non-negative integer device index, got a string ('x')"
        .format(path),
        "{}:8: ssh.conf.port: port must be between 1 and 65535, got 0".format(path),
        "{}:3: nodes[0].gpu: unknown key (did you mean 'gpus'?)".format(path),
        "{}:5: nodes[1].address: missing required key (IPv4 or IPv6 address or hostname of the node)"
        .format(path),
    ]
    assert len(exc.problems) == 5 and all(isinstance(p, ResourceSpecError) for p in exc.problems)
