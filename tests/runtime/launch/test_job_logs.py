"""The chief's job log directories: older ones are pruned, never a running job's, also while another job prunes."""
import os
import shutil
import stat
import subprocess
import sys
import time

from autodist.runner import new_job_id
from autodist.runtime.launch import job_logs
from autodist.runtime.launch.job_logs import JobLogs


def _older(base, names):
    for i, name in enumerate(names):
        path = os.path.join(str(base), "job-" + name)
        os.makedirs(path)
        os.utime(path, (1000 + i, 1000 + i))


def test_all_but_the_newest_older_logs_are_pruned(tmp_path):
    _older(tmp_path, ["a", "b", "c"])
    new = new_job_id()
    JobLogs(new, base=str(tmp_path), keep=2).create()
    assert set(os.listdir(str(tmp_path))) == {"job-c", "job-" + new}


def test_a_directory_another_job_pruned_meanwhile_is_passed_over(tmp_path, monkeypatch):
    _older(tmp_path, ["a", "b", "c"])
    listed = os.scandir

    def racing(path):   # the other job removes job-b after this one listed it, before it reads its time
        if not isinstance(path, str) or os.path.abspath(path) != str(tmp_path):
            return listed(path)   # rmtree's own listings
        with listed(path) as found:
            entries = list(found)
        shutil.rmtree(os.path.join(str(tmp_path), "job-b"))
        return entries

    monkeypatch.setattr(job_logs.os, "scandir", racing)
    new = new_job_id()
    JobLogs(new, base=str(tmp_path), keep=2).create()
    assert set(os.listdir(str(tmp_path))) == {"job-c", "job-" + new}


def _aged(logs, seconds=1000):
    """Make ``logs``'s directory look ``seconds`` old, as a long job's does (files grow, the directory stays)."""
    path = os.path.expanduser(logs.path)
    os.utime(path, (time.time() - seconds,) * 2)
    return path


def test_a_sweep_of_short_jobs_leaves_the_logs_of_a_job_that_still_runs(tmp_path):
    """Before: the 20 newest directories by modification time were kept, whatever ran (issue 33, item 7)."""
    long = JobLogs(new_job_id(), base=str(tmp_path), keep=3)
    long.create()
    with open(long.file("127.0.0.2", "worker"), "w") as log:
        log.write("epoch 1\n")
    path = _aged(long)
    for _ in range(8):
        short = JobLogs(new_job_id(), base=str(tmp_path), keep=3)
        short.create()
        short.release()
    assert os.path.isfile(os.path.join(path, "127.0.0.2-worker.log"))
    assert len([name for name in os.listdir(str(tmp_path)) if name.startswith("job-")]) == 4
    long.release()   # it has ended: now it is old logs like any other
    _aged(long)
    JobLogs(new_job_id(), base=str(tmp_path), keep=3).create()
    assert not os.path.exists(path)


HOLD = """import sys, time
from autodist.runtime.launch.job_logs import JobLogs
logs = JobLogs(sys.argv[1], base=sys.argv[2])
print(logs.create(), flush=True)
time.sleep(120)
"""


def test_the_lock_follows_the_chiefs_process_also_when_it_is_killed(tmp_path):
    job_id = new_job_id()
    chief = subprocess.Popen([sys.executable, "-c", HOLD, job_id, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        path = chief.stdout.readline().strip()
        assert os.path.isdir(path)
        os.utime(path, (1000, 1000))
        JobLogs(new_job_id(), base=str(tmp_path), keep=1).create()
        assert os.path.isdir(path), "the other process's job still runs"
    finally:
        chief.kill()
        chief.wait(30)
        chief.stdout.close()
    os.utime(path, (1000, 1000))
    JobLogs(new_job_id(), base=str(tmp_path), keep=1).create()
    assert not os.path.exists(path), "a killed chief's lock is gone with its process"


def test_the_log_directories_are_owner_only_also_under_a_loose_umask(tmp_path):
    base = tmp_path / "home" / ".autodist" / "logs"
    previous = os.umask(0o022)
    try:
        logs = JobLogs(new_job_id(), base=str(base))
        path = logs.create()
        logs.release()
    finally:
        os.umask(previous)
    for directory in (base.parent, base, path):
        assert stat.S_IMODE(os.stat(str(directory)).st_mode) == 0o700, directory
    assert os.listdir(path) == [], "the finished job's lock file is gone"
