"""The restart supervisor with stand-in attempts (small python commands, no job)."""
import io
import sys

from autodist.runtime.recovery.restart import EXIT_RESTARTS_EXHAUSTED, NODE_FAILED, supervise

# Fails with NODE_FAILED (and an error line) until it has run ``fail`` times, then exits ``final``.
ATTEMPT = """import pathlib, sys
count = pathlib.Path(sys.argv[1])
runs = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(runs))
if runs <= int(sys.argv[2]):
    print("autodist: error: worker on 127.0.0.2 failed: run " + str(runs), file=sys.stderr)
    sys.exit(int(sys.argv[4]))
sys.exit(int(sys.argv[3]))
"""


def _supervise(tmp_path, fail, final, max_restarts):
    sink = io.StringIO()
    argv = [sys.executable, "-c", ATTEMPT, str(tmp_path / "runs"), str(fail), str(final), str(NODE_FAILED)]
    code = supervise(argv, max_restarts, backoff=0.01, sink=sink)
    return code, sink.getvalue(), int((tmp_path / "runs").read_text())


def test_node_failures_are_restarted_until_an_attempt_succeeds(tmp_path):
    code, said, runs = _supervise(tmp_path, fail=2, final=0, max_restarts=3)
    assert (code, runs) == (0, 3)
    lines = said.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[autodist] restart 1 of 3 in 0.01 s: attempt 1 (")
    # the supervisor cannot know whether the script keeps checkpoints: the attempt says where it resumes
    assert lines[0].endswith("s): worker on 127.0.0.2 failed: run 1; the script starts again as a new job")
    assert lines[1].startswith("[autodist] restart 2 of 3")


def test_exhausted_restarts_exit_1_with_every_attempt(tmp_path):
    code, said, runs = _supervise(tmp_path, fail=5, final=0, max_restarts=1)
    assert (code, runs) == (EXIT_RESTARTS_EXHAUSTED, 2)
    assert "[autodist] the job failed 2 time(s), no restart left (--max-restarts 1):" in said
    assert "worker on 127.0.0.2 failed: run 1" in said and "worker on 127.0.0.2 failed: run 2" in said


def test_any_other_status_is_final(tmp_path):
    for final in (3, 130, 143):
        (tmp_path / "runs").unlink(missing_ok=True)
        code, said, runs = _supervise(tmp_path, fail=0, final=final, max_restarts=3)
        assert (code, runs, said) == (final, 1, "")


def test_each_attempt_knows_its_number_and_the_api_names_its_setting(tmp_path):
    from autodist.runtime.recovery.restart import ATTEMPT_ENV, attempt_of
    record = ("import os, sys; open(sys.argv[1], 'a').write(os.environ['{}'] + ' '); "
              "print('autodist: error: gone', file=sys.stderr); sys.exit({})").format(ATTEMPT_ENV, NODE_FAILED)
    sink = io.StringIO()
    code = supervise([sys.executable, "-c", record, str(tmp_path / "seen")], 2, backoff=0.01, sink=sink,
                     option="max_restarts=")
    assert code == EXIT_RESTARTS_EXHAUSTED
    assert (tmp_path / "seen").read_text() == "1 2 3 "
    assert "no restart left (max_restarts=2):" in sink.getvalue()
    assert (attempt_of({ATTEMPT_ENV: "2"}), attempt_of({}), attempt_of({ATTEMPT_ENV: "x"})) == (2, None, None)


def test_an_api_chief_with_max_restarts_supervises_and_exits_with_the_last_status(tmp_path, monkeypatch, capsys):
    import pytest
    from autodist import AutoDist
    from autodist.runtime.recovery.restart import ATTEMPT_ENV
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: 127.0.0.1\n")
    monkeypatch.delenv(ATTEMPT_ENV, raising=False)
    attempt = ("import sys; print('autodist: error: worker on 127.0.0.2 failed', file=sys.stderr); "
               "sys.exit({})".format(NODE_FAILED))
    with pytest.raises(SystemExit) as ended:   # every attempt failed: the supervisor's status
        AutoDist(str(spec), max_restarts=1, restart_backoff=0.01, launch_argv=["-c", attempt])
    assert ended.value.code == EXIT_RESTARTS_EXHAUSTED
    assert "no restart left (max_restarts=1):" in capsys.readouterr().out
    with pytest.raises(SystemExit) as ended:
        AutoDist(str(spec), max_restarts=1, launch_argv=["-c", "import sys; sys.exit(3)"])
    assert ended.value.code == 3
    monkeypatch.setenv(ATTEMPT_ENV, "2")   # inside an attempt: AutoDist trains instead
    ad = AutoDist(str(spec), max_restarts=1)
    assert (ad.job.attempt, ad.job.node_failure_status) == (2, NODE_FAILED)


SUPERVISOR = """import sys
from autodist.runtime.recovery.restart import supervise
sys.exit(supervise([sys.executable, "-c", "import sys; sys.exit({})"], 3, backoff=60))
""".format(NODE_FAILED)


def test_ctrl_c_during_the_back_off_ends_with_130_and_one_line(tmp_path):
    """Issue 33, item 9: before, a KeyboardInterrupt traceback from time.sleep."""
    import signal
    import subprocess
    supervisor = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    try:
        line = supervisor.stdout.readline()   # the restart line: the back-off has begun
        assert line.startswith("[autodist] restart 1 of 3 in 60 s: "), line
        supervisor.send_signal(signal.SIGINT)
        out, err = supervisor.communicate(timeout=30)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.communicate(timeout=30)
    assert supervisor.returncode == 130
    assert err == "autodist: interrupted between two attempts (no job was running); no restart\n"
