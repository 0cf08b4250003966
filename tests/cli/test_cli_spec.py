"""``autodist spec validate`` / ``autodist spec schema`` and the CLI's error contract."""
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from autodist import cli
from autodist.spec.schema import describe_schema

SPECS = pathlib.Path(__file__).resolve().parents[2] / "resource_specs"

BAD_SPEC = textwrap.dedent("""\
    # two nodes, one key misspelled
    nodes:
      - address: 10.0.0.1
        chief: true
      - address: 10.0.0.2
        ssh_config: conf
        gpu: [0, 1]
    ssh:
      conf:
        username: ubuntu
    """)


def run_module(*args):
    return subprocess.run([sys.executable, "-m", "autodist", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def bad_spec(tmp_path):
    path = tmp_path / "spec.yml"
    path.write_text(BAD_SPEC, encoding="utf-8")
    return path


def test_validate_good_spec_in_a_subprocess(tmp_path):
    path = SPECS / "two_nodes.yml"
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("the spec's key_file exists: no warning")
    result = subprocess.run([sys.executable, "-m", "autodist", "spec", "validate", str(path)],
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME=str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "{} (two-gpu-nodes): ok: 2 nodes, 10 devices (2 CPU, 8 GPU), chief 192.168.1.10".format(path)]
    assert result.stderr == ""


def test_validate_bad_spec_in_a_subprocess(bad_spec):
    result = run_module("spec", "validate", str(bad_spec))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "autodist: error: {}:7: nodes[1].gpu: unknown key (did you mean 'gpus'?)".format(bad_spec)]
    assert "Traceback" not in result.stderr


def test_console_script_behaves_like_the_module(bad_spec):
    exe = shutil.which("autodist")
    if exe is None:
        pytest.skip("the autodist console script is not installed on PATH")
    result = subprocess.run([exe, "spec", "validate", str(bad_spec)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("autodist: error: {}:7: nodes[1].gpu:".format(bad_spec))


def test_validate_does_not_import_tensorflow():
    code = ("import sys; from autodist.cli import main; "
            "status = main(['spec', 'validate', sys.argv[1]]); "
            "print(status, 'tensorflow' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code, str(SPECS / "heterogeneous.yml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "0 False"


def test_missing_file_is_a_user_error(tmp_path, capsys):
    missing = tmp_path / "absent.yml"
    assert cli.main(["spec", "validate", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.err == "autodist: error: cannot read {}: No such file or directory\n".format(
        missing)


def test_several_files_one_line_each(bad_spec, capsys):
    good = [str(SPECS / "single_node_cpu.yml"), str(SPECS / "loopback_two_nodes.yml")]
    assert cli.main(["spec", "validate", good[0], str(bad_spec), good[1]]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "{}: ok: 1 node, 1 device (1 CPU, 0 GPU), chief 127.0.0.1".format(good[0]),
        "{} (loopback-two-nodes): ok: 2 nodes, 2 devices (2 CPU, 0 GPU), chief 127.0.0.1".format(
            good[1])]
    assert len(captured.err.splitlines()) == 1


def test_all_shipped_specs_validate(capsys):
    files = sorted(str(p) for p in SPECS.glob("*.yml"))
    assert cli.main(["spec", "validate", *files]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(files)


@pytest.mark.parametrize("argv", [[], ["spec"], ["spec", "validate"], ["spec", "frobnicate"]])
def test_usage_errors_return_2(argv, capsys):
    assert cli.main(argv) == 2
    assert "usage: autodist" in capsys.readouterr().err


def test_help_returns_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "spec" in capsys.readouterr().out


def test_schema_lists_every_key(capsys):
    assert cli.main(["spec", "schema"]) == 0
    out = capsys.readouterr().out
    for line in describe_schema():
        assert line in out
    for key in ("nodes[].address", "nodes[].network_bandwidth", "ssh.<name>.port",
                "ssh.<name>.accept_new_host_keys", "ssh.<name>.known_hosts_file", "node_template.cpus",
                "node_template.ssh_config"):
        assert key in out


def test_unexpected_errors_keep_their_traceback(monkeypatch):
    from autodist.cli import spec as spec_command

    def broken(path):
        raise KeyError("a bug, not a user error")
    monkeypatch.setattr(spec_command, "ResourceSpec", broken)
    with pytest.raises(KeyError):
        cli.main(["spec", "validate", "x.yml"])


def test_validate_reports_every_problem_of_a_file_one_line_each(tmp_path, capsys):
    path = tmp_path / "spec.yml"
    path.write_text("nodes:\n  - gpus: [x]\nssh:\n  c:\n    port: ssh\n")
    assert cli.main(["spec", "validate", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "autodist: error: {}:2: nodes[0].gpus[0]: expected a non-negative integer device index, got a string "
        "('x')".format(path),
        "autodist: error: {}:5: ssh.c.port: expected an integer port, got a string ('ssh')".format(path),
        "autodist: error: {}:2: nodes[0].address: missing required key (IPv4 or IPv6 address or hostname of the "
        "node)".format(path)]


def test_an_os_error_is_reported_without_guessing_the_operation(capsys):
    """Issue 33, item 10: every OSError with a file name read 'cannot read <file>', a failed write too."""
    from autodist.cli.common import report_error
    report_error(OSError(28, "No space left on device", "/src/strategy.pb", None, "/full/strategy.pb"))
    report_error(PermissionError(13, "Permission denied", "/etc/out.yml"))
    report_error(FileNotFoundError(2, "No such file or directory", "spec.yml"))
    assert capsys.readouterr().err.splitlines() == [
        "autodist: error: /src/strategy.pb -> /full/strategy.pb: No space left on device",
        "autodist: error: /etc/out.yml: Permission denied",
        "autodist: error: cannot read spec.yml: No such file or directory"]
