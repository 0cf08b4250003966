"""``autodist run``'s elastic, tf.data and checkpoint options: parsed, checked, and passed to every node and attempt."""
import os

import pytest

from autodist import cli
from autodist.capture.datasets import AUTO_SHARD_POLICIES, POLICIES
from autodist.cli import build_parser
from autodist.cli.run import _attempt_argv, worker_argv
from autodist.cli.run_options import (AUTO_SHARD_CHOICES, UNEVEN_CHOICES, checkpoint_schedule, elastic_of,
                                      input_argv)
from autodist.errors import ArgumentError
from autodist.spec.resource_spec import ResourceSpec

SPEC = ResourceSpec.from_dict({"nodes": [{"address": "127.0.0.1", "chief": True}, {"address": "127.0.0.2"}]})


def test_the_choices_are_the_packages():
    assert (UNEVEN_CHOICES, AUTO_SHARD_CHOICES) == (POLICIES, AUTO_SHARD_POLICIES)


def test_pipeline_options_reach_every_node_and_every_attempt():
    args = build_parser().parse_args(["run", "--uneven-inputs", "join", "--auto-shard", "data",
                                      "--max-restarts", "1", "train.py", "--epochs", "2"])
    assert input_argv(args) == ["--uneven-inputs", "join", "--auto-shard", "data"]
    assert worker_argv("/s.yml", None, [], "/t.py", ["--epochs", "2"], node_options=input_argv(args)) == [
        "-m", "autodist", "run", "-r", "/s.yml", "--uneven-inputs", "join", "--auto-shard", "data", "/t.py",
        "--epochs", "2"]
    attempt = _attempt_argv(args, "/s.yml", "/t.py", None, None)
    assert attempt.index("--uneven-inputs") < attempt.index("/t.py")


def test_sync_batch_norm_reaches_every_node_and_every_attempt():
    args = build_parser().parse_args(["run", "--sync-batch-norm", "--max-restarts", "1", "train.py"])
    assert input_argv(args) == ["--sync-batch-norm"]
    assert "--sync-batch-norm" in _attempt_argv(args, "/s.yml", "/t.py", None, None)
    assert input_argv(build_parser().parse_args(["run", "train.py"])) == []


def test_elastic_options_make_a_supervisor_whose_attempts_do_not_supervise():
    args = build_parser().parse_args(["run", "--host-discovery-script", "hosts.sh", "--min-nodes", "1",
                                      "--max-nodes", "2", "--preemption-signal", "SIGUSR1", "train.py"])
    settings = elastic_of(args, SPEC)
    assert (settings.discovery_script, settings.min_nodes, settings.max_nodes) == ("hosts.sh", 1, 2)
    assert settings.preemption_signal == "SIGUSR1"
    attempt = _attempt_argv(args, "/s.yml", "/t.py", None, None)
    assert "--host-discovery-script" not in attempt and "--elastic" not in attempt
    assert elastic_of(build_parser().parse_args(["run", "train.py"]), SPEC) is None


def test_elastic_options_out_of_range_are_refused_with_their_names(capsys):
    for argv, message in ((["--max-nodes", "3", "--elastic"], "--min-nodes 1 and --max-nodes 3"),
                          (["--max-nodes", "2"], "--max-nodes limits an elastic job: give --host-discovery-script"),
                          (["--elastic", "--preemption-signal", "KILL"], "--preemption-signal: 'KILL' is not")):
        with pytest.raises(ArgumentError, match=message):
            elastic_of(build_parser().parse_args(["run"] + argv + ["train.py"]), SPEC)
    assert cli.main(["run", "--uneven-inputs", "first", "train.py"]) == 2
    assert "invalid choice: 'first'" in capsys.readouterr().err


def test_checkpoint_options_reach_every_node_and_every_attempt_with_the_directory_made_absolute():
    args = build_parser().parse_args(["run", "--checkpoint-dir", "ckpt", "--checkpoint-steps", "5",
                                      "--max-restarts", "1", "train.py"])
    assert input_argv(args)[:2] == ["--checkpoint-dir", os.path.join(os.getcwd(), "ckpt")]
    assert input_argv(args)[2:] == ["--checkpoint-steps", "5"]
    attempt = _attempt_argv(args, "/s.yml", "/t.py", None, None)
    assert attempt.index("--checkpoint-steps") < attempt.index("/t.py")
    assert checkpoint_schedule(args) == (5, None)
    assert checkpoint_schedule(build_parser().parse_args(["run", "--checkpoint-dir", "d", "t.py"])) == (None, 60.0)


@pytest.mark.parametrize("argv,says", [
    (["--checkpoint-steps", "3"], "give --checkpoint-dir DIR too"),
    (["--checkpoint-dir", "d", "--uneven-inputs", "end"], "--checkpoint-dir with --uneven-inputs"),
    (["--checkpoint-dir", "d", "--checkpoint-steps", "0"], "--checkpoint-steps"),
    (["--checkpoint-dir", "d", "--checkpoint-secs", "0.1"], "--checkpoint-secs")])
def test_checkpoint_options_that_cannot_work_are_refused_before_anything_runs(tmp_path, capsys, argv, says):
    script = tmp_path / "t.py"
    script.write_text("raise SystemExit('not reached')\n")
    spec = tmp_path / "s.yml"
    spec.write_text("nodes:\n  - address: 127.0.0.1\n")
    assert cli.main(["run", "-r", str(spec)] + argv + [str(script)]) == 2
    assert says in capsys.readouterr().err
