"""SrunRunner through the stand-in ``srun`` (tests/runner/fake_srun): steps, stops, files, typed errors."""
import io
import os
import sys

import pytest

from autodist.errors import LaunchError
from autodist.runner.base import run_for_output
from autodist.runner.srun import STEP_OPTIONS, SrunRunner, allocation_hosts, srun_runner, step_argv
from process_state import alive

PY = sys.executable
FAKE_SRUN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_srun")


@pytest.fixture
def allocation(monkeypatch, tmp_path):
    """A fake allocation of 127.0.0.1 and 127.0.0.2 with the stand-in srun first on PATH; its call log."""
    monkeypatch.setenv("PATH", FAKE_SRUN_DIR + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("SLURM_JOB_NODELIST", "127.0.0.[1-2]")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(tmp_path / "srun.log"))
    return tmp_path / "srun.log"


@pytest.fixture
def out():
    return io.StringIO()


def test_a_step_is_one_task_on_the_named_host_in_an_overlapping_step():
    argv = step_argv("gpu07", ["python", "train.py", "a b"], env={"K": "v w"}, cwd="/work/p", guard=False)
    assert argv == ["srun"] + list(STEP_OPTIONS) + ["--nodelist=gpu07", "--chdir=/work/p", "env", "--",
                                                    "K=v w", "python", "train.py", "a b"]
    assert {"--nodes=1", "--ntasks=1", "--overlap", "--kill-on-bad-exit=1"} <= set(STEP_OPTIONS)
    guarded = step_argv("gpu07", ["true"])
    assert guarded[:2] == [sys.executable, "-c"] and guarded[4:] == step_argv("gpu07", ["true"], guard=False)


def test_output_env_cwd_and_exit_code_come_back_through_srun(allocation, out, tmp_path):
    runner = SrunRunner("127.0.0.2", sink=out)
    runner.connect()
    handle = runner.run([PY, "-c", "import os, sys; print(os.environ['K'], os.environ['SLURMD_NODENAME'], "
                                   "os.getcwd()); sys.exit(3)"], env={"K": "v w"}, cwd=str(tmp_path))
    assert handle.wait(60) == 3
    assert handle.terminate(grace=5.0) == 3   # a step that ended: no signal to send, its own status
    assert out.getvalue().splitlines() == ["[127.0.0.2] v w 127.0.0.2 {}".format(tmp_path)]
    assert "--nodelist=127.0.0.2" in allocation.read_text()


def test_terminate_stops_the_task_through_srun(allocation, out):
    runner = SrunRunner("127.0.0.2", sink=out)
    handle = runner.run([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    assert _wait_line(handle, "up")
    assert handle.terminate(grace=5.0) == 143   # SIGTERM, forwarded to the task
    assert handle.terminate(grace=5.0) == 143   # a second call: stopped already, the same status


def test_a_task_that_ignores_sigterm_is_killed_by_srun(allocation, out):
    runner = SrunRunner("127.0.0.2", sink=out)
    handle = runner.run([PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                   "print('up', flush=True); time.sleep(60)"])
    assert _wait_line(handle, "up")
    assert handle.terminate(grace=0.5) == 137   # two SIGINTs: srun kills the step


def test_files_are_made_copied_and_removed_through_steps(allocation, tmp_path):
    runner = SrunRunner("127.0.0.2")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("tree")
    (tmp_path / "one.pb").write_bytes(b"\x00\x01strategy")
    dst = tmp_path / "node" / "job"
    runner.makedirs(str(dst))
    runner.copy(str(tmp_path / "one.pb"), str(dst / "deep" / "strategy.pb"))
    runner.copy(str(src), str(dst / "tree"))
    assert (dst / "deep" / "strategy.pb").read_bytes() == b"\x00\x01strategy"
    assert (dst / "tree" / "sub" / "a.txt").read_text() == "tree"
    runner.remove_tree(str(dst))
    assert not dst.exists()


def test_a_failed_copy_names_the_host_and_the_path(allocation, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "blocker").write_text("not a directory")
    with pytest.raises(LaunchError, match=r"srun --nodelist=127\.0\.0\.2: copying .* to .*blocker/x failed"):
        SrunRunner("127.0.0.2").copy(str(tmp_path / "file"), str(tmp_path / "blocker" / "x"))


def test_srun_missing_from_path_is_a_typed_error_naming_path(monkeypatch):
    environ = {"PATH": "/nonexistent", "SLURM_JOB_NODELIST": "n[1-2]"}
    with pytest.raises(LaunchError, match=r"'srun' is not on PATH \(/nonexistent\)"):
        SrunRunner("n2", environ=environ).connect()


def test_a_host_outside_the_allocation_is_a_typed_error_naming_it(allocation):
    with pytest.raises(LaunchError, match=r"host 127\.0\.0\.3 is not in this Slurm allocation "
                                          r"\(SLURM_JOB_NODELIST=127\.0\.0\.\[1-2\]: 127\.0\.0\.1 127\.0\.0\.2\)"):
        SrunRunner("127.0.0.3").connect()


def test_outside_an_allocation_the_error_names_the_variable():
    with pytest.raises(LaunchError, match="SLURM_JOB_NODELIST is not set"):
        allocation_hosts({"PATH": os.environ["PATH"]})


def test_the_stand_in_refuses_unknown_hosts_and_options(allocation):
    code, output = run_for_output(SrunRunner("127.0.0.9"), ["true"], 30)
    assert code == 1 and "Requested node configuration is not available: '127.0.0.9'" in output
    from autodist.runner.local import LocalRunner
    code, output = run_for_output(LocalRunner(), ["srun", "--bogus", "true"], 30)
    assert code == 1 and "unrecognized option '--bogus'" in output


def test_the_chief_runs_locally_and_the_other_nodes_through_srun():
    from autodist.runner.local import LocalRunner
    from autodist.spec.resource_spec import ResourceSpec
    spec = ResourceSpec.from_dict({"nodes": [{"address": "127.0.0.1", "chief": True}, {"address": "127.0.0.2"}]})
    runners = {n.address: srun_runner(n, spec) for n in spec.node_specs}
    assert type(runners["127.0.0.1"]) is LocalRunner and isinstance(runners["127.0.0.2"], SrunRunner)


def _wait_line(handle, line, timeout=30.0):
    from autodist.runner.base import wait_until
    return wait_until(lambda: line in handle.tail(5).splitlines(), timeout)


def test_preflight_names_every_host_srun_cannot_reach(allocation, monkeypatch):
    from autodist.errors import PreflightError
    from autodist.runner.preflight import preflight
    with pytest.raises(PreflightError) as info:
        preflight([SrunRunner("127.0.0.3"), SrunRunner("127.0.0.4")], {"autodist": "x"}, timeout=30)
    assert "127.0.0.3 is not in this Slurm allocation" in str(info.value)
    assert "127.0.0.4 is not in this Slurm allocation" in str(info.value)


def test_a_step_ends_when_the_chief_is_killed_outright(allocation, tmp_path):
    """The guard around srun notices the chief is gone and stops the step, as terminate would."""
    import subprocess
    from autodist.runner.base import wait_until
    pid_file = tmp_path / "task.pid"
    chief = subprocess.Popen([PY, "-c", "import sys, time; from autodist.runner.srun import SrunRunner; "
                                        "SrunRunner('127.0.0.2').run(sys.argv[1:]); time.sleep(60)",
                              PY, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); "
                                        "time.sleep(60)", str(pid_file)])
    try:
        assert wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30)
        task = int(pid_file.read_text())
        chief.kill()
        chief.wait(10)
        assert wait_until(lambda: not alive(task), 15), "the task outlived the chief"
    finally:
        chief.kill()


