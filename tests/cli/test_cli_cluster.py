"""``autodist cluster``'s refusals: they need no namespace (what the commands make: tests/multihost)."""
import pytest

from autodist.cli import main


@pytest.mark.parametrize("argv", [["up", "-n", "2", "-o", "x.yml"], ["down"], ["link", "0", "down"],
                                  ["exec", "0", "--", "true"]])
def test_every_action_needs_root_and_says_so(argv, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.chdir(tmp_path)
    assert main(["cluster"] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("autodist: error: autodist cluster {} needs root".format(argv[0])) and "sudo" in err
    assert not (tmp_path / "x.yml").exists()


def test_bad_rate_and_name_are_usage_errors(capsys):
    assert main(["cluster", "up", "-n", "2", "--rate", "1gbps", "-o", "x.yml"]) == 2
    assert "bytes per second" in capsys.readouterr().err
    assert main(["cluster", "down", "--name", "Bad Name"]) == 2
    assert "--name 'Bad Name'" in capsys.readouterr().err


def test_link_rate_needs_a_rate(capsys):
    assert main(["cluster", "link", "0", "rate"]) == 2
    assert "takes a rate" in capsys.readouterr().err
