"""The chief's job log directories: older ones are pruned, also while another job on the host prunes."""
import os
import shutil

from autodist.runner import new_job_id
from autodist.runtime import job_logs
from autodist.runtime.job_logs import JobLogs


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
