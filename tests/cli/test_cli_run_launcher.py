"""``autodist run --launcher`` and the spec of a Slurm allocation: chosen, parsed, passed on to the other nodes."""
import json
import os

import pytest

from autodist import cli
from autodist.cli import build_parser
from autodist.cli.run import _attempt_argv, resource_spec_of, worker_argv
from autodist.errors import LaunchError, ResourceSpecError
from autodist.runtime.launch.coordinator import default_runner, runner_factory
from autodist.runner.srun import pick_launcher, srun_runner

ALLOCATION = {"SLURM_JOB_NODELIST": "n[01-02]", "SLURMD_NODENAME": "n02", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"}


def test_srun_is_the_default_inside_an_allocation_and_ssh_elsewhere():
    assert pick_launcher(None, {"SLURM_JOB_NODELIST": "n1"}) == "srun"
    assert pick_launcher(None, {}) == "ssh"
    assert pick_launcher("ssh", {"SLURM_JOB_NODELIST": "n1"}) == "ssh"
    assert runner_factory("srun") is srun_runner and runner_factory("ssh") is default_runner
    with pytest.raises(LaunchError, match="unknown launcher 'mpirun': use one of ssh, srun"):
        pick_launcher("mpirun", {})


def test_the_launcher_option_is_parsed_and_checked(capsys):
    args = build_parser().parse_args(["run", "--launcher", "srun", "train.py"])
    assert (args.launcher, args.resource_spec, args.script) == ("srun", None, "train.py")
    assert cli.main(["run", "--launcher", "mpirun", "train.py"]) == 2
    assert "invalid choice: 'mpirun'" in capsys.readouterr().err


def test_without_a_spec_inside_an_allocation_the_spec_is_the_allocations():
    args = build_parser().parse_args(["run", "train.py"])
    spec, data = resource_spec_of(args, ALLOCATION)
    assert spec.chief == "n02" and [n.address for n in spec.node_specs] == ["n02", "n01"]
    assert [n.threads for n in spec.node_specs] == [8, 8]
    argv = worker_argv(data, None, [], "/t.py", [])
    assert argv[:4] == ["-m", "autodist", "run", "--spec-json"] and argv[5:] == ["/t.py"]
    member = build_parser().parse_args(["run", "--spec-json", argv[4], "train.py"])
    again, _ = resource_spec_of(member, {"SLURMD_NODENAME": "n01"})   # the other node: the chief's spec
    assert again.chief == "n02" and again.to_dict() == spec.to_dict()
    assert json.loads(argv[4]) == data


def test_a_spec_file_wins_and_without_either_the_error_says_what_to_do(tmp_path):
    args = build_parser().parse_args(["run", "-r", "s.yml", "train.py"])
    assert resource_spec_of(args, ALLOCATION) == (os.path.abspath("s.yml"),) * 2
    with pytest.raises(ResourceSpecError, match="no resource spec: give one with -r SPEC, or run inside a Slurm"):
        resource_spec_of(build_parser().parse_args(["run", "train.py"]), {})
    with pytest.raises(ResourceSpecError, match="SLURMD_NODENAME is not set, so this is not a node of the Slurm"):
        resource_spec_of(build_parser().parse_args(["run", "train.py"]), {"SLURM_JOB_NODELIST": "n[1-2]"})


def test_a_supervised_attempt_keeps_the_launcher():
    args = build_parser().parse_args(["run", "--launcher", "srun", "--max-restarts", "2", "train.py"])
    argv = _attempt_argv(args, "/s.yml", "/t.py", None, None)
    at = argv.index("--launcher")
    assert argv[at + 1] == "srun" and at < argv.index("/t.py")
