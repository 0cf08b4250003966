"""``autodist run --trace-dir / --logdir``: parsed, and passed on to the other nodes."""
from autodist.cli import build_parser
from autodist.cli.run import worker_argv


def test_the_view_options_are_parsed_before_the_script():
    args = build_parser().parse_args(["run", "-r", "s.yml", "--trace-dir", "t", "--logdir", "l", "train.py",
                                      "--trace-dir", "mine"])
    assert (args.trace_dir, args.logdir, args.script, args.script_args) == ("t", "l", "train.py",
                                                                            ["--trace-dir", "mine"])


def test_the_other_nodes_get_the_same_views():
    assert worker_argv("/s.yml", "PS", [], "/t.py", ["--x"], trace_dir="/tr", logdir="/lg") == [
        "-m", "autodist", "run", "-r", "/s.yml", "-s", "PS", "--trace-dir", "/tr", "--logdir", "/lg", "/t.py", "--x"]
    assert worker_argv("/s.yml", None, [], "/t.py", []) == ["-m", "autodist", "run", "-r", "/s.yml", "/t.py"]


def test_accumulation_steps_are_parsed_and_passed_on():
    args = build_parser().parse_args(["run", "-r", "s.yml", "--accumulation-steps", "4", "train.py"])
    assert args.accumulation_steps == 4
    from autodist.cli.run_options import input_argv
    assert worker_argv("/s.yml", None, [], "/t.py", [], node_options=input_argv(args)) == [
        "-m", "autodist", "run", "-r", "/s.yml", "--accumulation-steps", "4", "/t.py"]
