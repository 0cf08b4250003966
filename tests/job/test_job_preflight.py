"""Launching a job checks every host first: failures are reported together and nothing starts."""
import os

import pytest

from autodist.runtime.launch.coordinator import Coordinator
from autodist.errors import PreflightError
from autodist.spec.resource_spec import ResourceSpec
from autodist.runner import new_job_id
from jobtools import job_dir, job_processes, log_dir
from sshd_fixture import unused_port

pytestmark = [pytest.mark.slow, pytest.mark.ssh]


def _group(sshd, venv_prefix, **overrides):
    group = dict(username=sshd.user, port=sshd.port, key_file=sshd.client_keys["ed25519"],
                 known_hosts_file=sshd.known_hosts, python_venv=venv_prefix, connect_timeout=5)
    group.update(overrides)
    return group


def _launch(spec_data, tmp_path):
    spec = ResourceSpec.from_dict(spec_data, path=str(tmp_path / "spec.yml"))
    strategy = tmp_path / "strategy.pb"
    strategy.write_bytes(b"")
    job_id = new_job_id()
    coordinator = Coordinator(spec, job_id, preflight_timeout=30.0)
    with pytest.raises(PreflightError) as info:
        coordinator.launch(str(strategy), ["train.py"], str(tmp_path))
    assert not os.path.exists(job_dir(job_id)) and not os.path.exists(log_dir(job_id))
    assert job_processes(job_id) == []
    assert coordinator.handles() == {}
    return info.value


def test_unreachable_host_and_wrong_key_are_both_reported(sshd, venv_prefix, tmp_path):
    data = {"nodes": [{"address": "127.0.0.1", "chief": True},
                      {"address": "127.0.0.2", "ssh_config": "nothing_listens"},
                      {"address": "127.0.0.3", "ssh_config": "wrong_key"}],
            "ssh": {"nothing_listens": _group(sshd, venv_prefix, port=unused_port("127.0.0.2")),
                    "wrong_key": _group(sshd, venv_prefix, key_file=sshd.unauthorized_key)}}
    error = _launch(data, tmp_path)
    assert set(error.failures) == {"127.0.0.2", "127.0.0.3"}
    assert "cannot reach the host" in error.failures["127.0.0.2"]
    assert "authentication failed" in error.failures["127.0.0.3"]
    assert "nothing was launched" in str(error)


def test_unknown_host_key_is_refused_with_how_to_trust_it(sshd, venv_prefix, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    data = {"nodes": [{"address": "127.0.0.1", "chief": True},
                      {"address": "127.0.0.2", "ssh_config": "strict"}],
            "ssh": {"strict": _group(sshd, venv_prefix, known_hosts_file=str(empty))}}
    error = _launch(data, tmp_path)
    reason = error.failures["127.0.0.2"]
    assert "host key is unknown" in reason
    assert "ssh-keyscan -p {} 127.0.0.2".format(sshd.port) in reason and "accept_new_host_keys" in reason
    assert empty.read_text() == ""


def test_python_venv_without_autodist_is_reported(sshd, tmp_path):
    data = {"nodes": [{"address": "127.0.0.1", "chief": True},
                      {"address": "127.0.0.2", "ssh_config": "bare"}],
            "ssh": {"bare": _group(sshd, "export PATH=/nonexistent")}}
    error = _launch(data, tmp_path)
    assert "python3 not found" in error.failures["127.0.0.2"]
