"""Fixtures of the job-level tests: resource specs for the loopback sshd, chiefs cleaned up."""
import os

import pytest
import yaml

from jobtools import REPO, Chief

THREE_NODES = os.path.join(REPO, "resource_specs", "loopback_three_nodes.yml")


@pytest.fixture
def ssh_spec(sshd, venv_prefix, tmp_path):
    """``make(remote=("127.0.0.2", "127.0.0.3"), **ssh_group_overrides) -> spec file``.

    The shipped three-node template with the chief on 127.0.0.1 (local) and
    the listed loopback addresses reached through the test sshd.
    """
    def make(remote=("127.0.0.2", "127.0.0.3"), name="spec.yml", **overrides):
        with open(THREE_NODES) as f:
            data = yaml.safe_load(f)
        data["nodes"] = [n for n in data["nodes"] if n.get("chief") or n["address"] in remote]
        group = data["ssh"]["loopback"]
        group.update(username=sshd.user, port=sshd.port, key_file=sshd.client_keys["ed25519"],
                     known_hosts_file=sshd.known_hosts, python_venv=venv_prefix, connect_timeout=5)
        group.update(overrides)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return str(path)
    return make


@pytest.fixture
def chiefs():
    """``start(argv, **kwargs) -> Chief``; every chief and its job's processes are killed at the end."""
    started = []

    def start(argv, **kwargs):
        chief = Chief(argv, **kwargs)
        started.append(chief)
        return chief
    yield start
    for chief in started:
        chief.cleanup()
