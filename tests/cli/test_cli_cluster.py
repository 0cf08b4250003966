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


def test_an_empty_name_is_refused_not_taken_for_the_default(capsys):
    assert main(["cluster", "down", "--name", ""]) == 2
    assert "--name ''" in capsys.readouterr().err


@pytest.mark.parametrize("argv, name, command", [
    (["exec", "0", "--name", "b", "--", "hostname", "--name"], "b", ["hostname", "--name"]),
    (["exec", "0", "--name=b", "--", "true"], "b", ["true"]),
    (["exec", "--name", "b", "0", "--", "true"], "b", ["true"]),
    (["exec", "0", "--", "true"], None, ["true"]),
    (["exec", "0", "python", "-c", "1"], None, ["python", "-c", "1"]),
], ids=["name-after-node", "name-equals", "name-before-node", "plain", "no-separator"])
def test_exec_takes_the_cluster_name_before_or_after_the_node(argv, name, command):
    from autodist.cli import build_parser
    from autodist.cli.cluster import _command
    args = build_parser().parse_args(["cluster"] + argv)
    assert _command(args) == command and args.name == name


@pytest.mark.parametrize("argv, says", [
    (["exec", "0", "--verbose", "--", "true"], "'--verbose' before the command"),
    (["exec", "--name", "a", "0", "--name", "b", "--", "true"], "two cluster names"),
])
def test_exec_refuses_options_it_does_not_know_between_node_and_command(capsys, argv, says):
    assert main(["cluster"] + argv) == 2
    assert says in capsys.readouterr().err


def test_a_closed_reader_does_not_fail_the_command(tmp_path):
    # `autodist cluster up ... | head -n 1`: the lines after the reader left go nowhere; the status is the command's
    import subprocess
    import sys
    code = ("import sys\nfrom autodist.cli.cluster import _say\nfor i in range(2000): _say('made %d' % i)\n"
            "print('finished', file=sys.stderr)")
    done = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" -c "$1" | head -n 1', sys.executable, code],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "made 0\n", done.stderr
    assert "finished" in done.stderr and "Broken pipe" not in done.stderr
