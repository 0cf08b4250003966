"""preflight: every host checked in parallel, every failure reported, bounded in time."""
import importlib.metadata
import socket

import pytest

import autodist
from autodist.errors import PreflightError
from autodist.runner.preflight import VERSIONS_MARKER, check_host, local_versions, preflight
from recording_runner import RecordingRunner
from autodist.runner.ssh import SSHRunner

from sshd_fixture import unused_port

EXPECTED = {"autodist": "0.1.0", "tensorflow": "2.21.0"}


def fake_host(name, code, output, python_venv=None):
    runner = RecordingRunner(name, behaviour=lambda call: (code, output))
    runner.python_venv = python_venv
    return runner


def versions_line(autodist_version="0.1.0", tensorflow_version="2.21.0"):
    return '{} {{"autodist": "{}", "tensorflow": "{}", "python": "3.11.7"}}'.format(
        VERSIONS_MARKER, autodist_version, tensorflow_version)


def test_a_fit_host_passes_and_the_check_runs_python_in_the_venv():
    host = fake_host("a", 0, "some warning\n" + versions_line())
    assert check_host(host, EXPECTED, timeout=5) is None
    argv = host.calls[0].argv
    assert argv[:2] == ["python3", "-c"] and "import json, sys, autodist, tensorflow" in argv[2]


def test_every_failing_host_is_reported_with_its_reason():
    hosts = [
        fake_host("ok", 0, versions_line()),
        fake_host("old", 0, versions_line(autodist_version="0.0.9"), python_venv="source v"),
        fake_host("no-tf", 1, "Traceback...\nModuleNotFoundError: No module named 'tensorflow'"),
        fake_host("no-python", 127, "sh: 1: python3: not found"),
        fake_host("garbled", 0, "nothing useful"),
    ]
    with pytest.raises(PreflightError) as info:
        preflight(hosts, EXPECTED, timeout=10)
    failures = info.value.failures
    assert sorted(failures) == ["garbled", "no-python", "no-tf", "old"]
    assert "autodist 0.0.9 (expected 0.1.0)" in failures["old"] and "'source v'" in failures["old"]
    assert "No module named 'tensorflow'" in failures["no-tf"]
    assert "python3 not found" in failures["no-python"]
    assert "nothing useful" in failures["garbled"]
    assert "nothing was launched" in str(info.value)


def test_a_host_that_does_not_answer_is_reported_after_the_timeout(poll_until):
    hosts = [fake_host("ok", 0, versions_line()), fake_host("hung", None, "")]
    with pytest.raises(PreflightError) as info:
        preflight(hosts, EXPECTED, timeout=0.5)
    assert list(info.value.failures) == ["hung"]
    assert "no answer within" in info.value.failures["hung"]
    assert poll_until(lambda: hosts[1].handles[0].terminated, 5)  # the check was stopped


def test_a_crashing_check_is_that_hosts_failure():
    class Broken(RecordingRunner):
        def connect(self):
            raise ValueError("boom")
    with pytest.raises(PreflightError) as info:
        preflight([Broken("x"), fake_host("ok", 0, versions_line())], EXPECTED, timeout=5)
    assert list(info.value.failures) == ["x"] and "boom" in info.value.failures["x"]


def test_local_versions_match_the_installed_packages():
    versions = local_versions()
    assert versions["autodist"] == autodist.__version__
    assert versions["tensorflow"].split(".")[:2] == ["2", "21"]


@pytest.mark.ssh
@pytest.mark.slow
def test_preflight_over_ssh_passes_good_hosts_and_names_each_bad_one(sshd, venv_prefix,
                                                                     tmp_path):
    expected = {"autodist": autodist.__version__,
                "tensorflow": _installed_tensorflow_version()}
    good = dict(python_venv=venv_prefix, shared_envs={"TF_CPP_MIN_LOG_LEVEL": "3"})
    runners = [SSHRunner("127.0.0.2", sshd.config(**good)),
               SSHRunner("127.0.0.3", sshd.config(**good))]
    try:
        preflight(runners, expected, timeout=60)
    finally:
        for runner in runners:
            runner.close()

    silent = socket.socket()
    silent.bind(("127.0.0.3", 0))
    silent.listen()
    bad = {
        "127.0.0.1": sshd.config(port=unused_port("127.0.0.1")),             # nothing listening
        "127.0.0.2": sshd.config(key=sshd.unauthorized_key),                  # wrong key
        "127.0.0.3": sshd.config(port=silent.getsockname()[1], connect_timeout=30),  # no banner
    }
    runners = [SSHRunner(host, config) for host, config in bad.items()]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_line("localhost"))
    runners.append(SSHRunner("localhost", sshd.config(python_venv="export PATH=/nowhere",
                                                      known_hosts=str(known_hosts))))
    try:
        with pytest.raises(PreflightError) as info:
            preflight(runners, expected, timeout=3)
    finally:
        silent.close()
        for runner in runners:
            runner.close()
    failures = info.value.failures
    assert sorted(failures) == ["127.0.0.1", "127.0.0.2", "127.0.0.3", "localhost"]
    assert "cannot reach" in failures["127.0.0.1"]
    assert "authentication failed" in failures["127.0.0.2"]
    assert "no answer within 3s while connecting" in failures["127.0.0.3"]
    assert "python3 not found" in failures["localhost"] and "/nowhere" in failures["localhost"]


def _installed_tensorflow_version():
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    pytest.skip("tensorflow is not installed")


def test_the_local_versions_are_read_without_tensorflows_start_up_lines_on_the_console():
    # the elastic supervisor reads them when a remote host joins: it printed TensorFlow's start-up lines
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", "from autodist.runner.preflight import local_versions; "
                                                 "print(sorted(local_versions()))"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "['autodist', 'tensorflow']", done.stderr
    assert "absl::InitializeLog" not in done.stderr and "oneDNN" not in done.stderr, done.stderr
