"""Spec files as a user may give them by mistake (issue 17's probe): each is refused quickly and clearly.

A directory, a device, a FIFO, a huge file, an address with shell syntax, lists
of absurd length; and what ``autodist spec validate`` warns about although the
spec is valid (a key file missing here, shell syntax in ``python_venv``).
"""
import os
import threading

import pytest

from autodist.cli import main
from autodist.errors import ResourceSpecError
from autodist.spec.resource_spec import MAX_SPEC_BYTES, ResourceSpec
from autodist.spec.schema import MAX_DEVICES
from autodist.spec.yaml_tree import MAX_VALUES

ONE_NODE = "nodes:\n  - address: 127.0.0.1\n"
SSH_SPEC = """\
ssh:
  conf:
    username: ubuntu
    key_file: {key}
    python_venv: {venv!r}
nodes:
  - address: 10.0.0.1
    chief: true
  - address: 10.0.0.2
    ssh_config: conf
"""


def test_a_directory_is_a_spec_error_naming_it(tmp_path):
    with pytest.raises(ResourceSpecError, match="a directory; give the path of the resource spec's YAML file") as info:
        ResourceSpec(tmp_path)
    assert info.value.path == str(tmp_path)


def test_a_directory_given_to_autodist_is_a_spec_error(tmp_path):
    from autodist import AutoDist
    with pytest.raises(ResourceSpecError, match="a directory"):
        AutoDist(str(tmp_path))


def test_a_link_to_dev_zero_is_refused_without_reading(tmp_path):
    link = tmp_path / "spec.yml"
    link.symlink_to("/dev/zero")
    with pytest.raises(ResourceSpecError, match="not a regular file"):
        ResourceSpec(link)


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "spec.yml"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error_of(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():   # unblock the reader so the test process can end
        with open(fifo, "w"):
            pass
        pytest.fail("reading a FIFO spec blocked")
    assert "not a regular file" in outcome[0]


def _error_of(path):
    try:
        ResourceSpec(path)
    except ResourceSpecError as e:
        return str(e)
    return "no error"


def test_a_file_over_the_size_cap_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    path = tmp_path / "spec.yml"
    path.write_text(ONE_NODE + "# " + "x" * MAX_SPEC_BYTES + "\n")
    monkeypatch.setattr("autodist.spec.resource_spec.parse_text", lambda *_: pytest.fail("the file was parsed"))
    with pytest.raises(ResourceSpecError, match="larger than 1 MiB"):
        ResourceSpec(path)


def test_too_many_gpu_indices_are_refused_before_checking_each(tmp_path):
    path = tmp_path / "spec.yml"
    path.write_text(ONE_NODE + "    gpus: [{}]\n".format(", ".join(str(i) for i in range(MAX_DEVICES + 1))))
    with pytest.raises(ResourceSpecError, match=r"nodes\[0\]\.gpus: 1025 devices listed; at most 1024"):
        ResourceSpec(path)
    path.write_text(ONE_NODE + "    gpus: [{}]\n".format(", ".join(str(i) for i in range(MAX_DEVICES))))
    assert ResourceSpec(path).num_gpus == MAX_DEVICES


def test_a_file_of_400000_list_items_stops_at_the_value_cap(tmp_path, monkeypatch):
    """The parser stops composing at the cap (the uncapped file took 38 s and 1.3 GB), counted, not timed."""
    import yaml
    composed = []
    compose = yaml.composer.Composer.compose_node
    monkeypatch.setattr(yaml.composer.Composer, "compose_node",
                        lambda self, *args: composed.append(1) or compose(self, *args))
    path = tmp_path / "spec.yml"
    path.write_text(ONE_NODE + "    gpus: [{}]\n".format(",".join("0" for _ in range(400000))))
    with pytest.raises(ResourceSpecError, match="more than 50000 values") as info:
        ResourceSpec(path)
    assert info.value.line == 3
    assert MAX_VALUES <= len(composed) <= MAX_VALUES + 1


@pytest.mark.parametrize("address, shown", [("10.0.0.2;reboot", "';'"), ("h${IFS}x", "'$' '{' '}'"),
                                            ("$(id)", "'$' '(' ')'"), ("host`id`", "'`'")])
def test_an_address_with_shell_syntax_names_the_characters(address, shown):
    with pytest.raises(ResourceSpecError) as info:
        ResourceSpec.from_dict({"nodes": [{"address": address}]})
    assert "contains {}".format(shown) in str(info.value)
    assert "network" not in str(info.value)


def test_a_network_is_still_called_a_network():
    with pytest.raises(ResourceSpecError, match="got a network"):
        ResourceSpec.from_dict({"nodes": [{"address": "10.0.0.0/8"}]})


def _validate(tmp_path, capsys, key, venv):
    path = tmp_path / "spec.yml"
    path.write_text(SSH_SPEC.format(key=key, venv=venv))
    status = main(["spec", "validate", str(path)])
    out, err = capsys.readouterr()
    return path, status, out, err


def test_validate_warns_of_a_missing_key_file_and_still_passes(tmp_path, capsys):
    path, status, out, err = _validate(tmp_path, capsys, tmp_path / "no_such_key", "")
    assert status == 0 and ": ok: 2 nodes" in out
    assert err.splitlines() == ["autodist: warning: {}:4: ssh.conf.key_file: {} does not exist on this machine; it "
                                "must exist on the machine that launches the job (the chief)".format(
                                    path, tmp_path / "no_such_key")]


def test_validate_says_python_venv_runs_as_written(tmp_path, capsys):
    key = tmp_path / "id"
    key.write_text("key")
    path, status, out, err = _validate(tmp_path, capsys, key, "source ~/venv/bin/activate; export X=$(id)")
    assert status == 0
    assert err.startswith("autodist: warning: {}:5: ssh.conf.python_venv: ".format(path))
    assert "contains shell syntax; it runs as written" in err
    _, _, _, quiet = _validate(tmp_path, capsys, key, "")
    assert quiet == ""
