"""The job's node logs on the chief: one file per launched process, kept after the job ends.

The job directory on every node (``~/.autodist/jobs/job-<id>/``: the
strategy) is removed when the job ends; the full output of every process
the chief launched stays, on the chief, in::

    ~/.autodist/logs/job-<id>/            mode 0700, like the job directories
        127.0.0.2-server.log              everything the process printed, chatter included
        127.0.0.2-worker.log

The console shows a node's own lines only (``autodist.runner.console``) and
names this directory when the job starts. The ``KEEP`` newest job log
directories are kept; older ones are removed when a job starts.
"""
import os
import shutil

from autodist.runner.allocation import job_workdir

__all__ = ["JobLogs", "LOG_BASE", "KEEP"]

LOG_BASE = "~/.autodist/logs"
KEEP = 20
_PREFIX = "job-"


class JobLogs:
    """The log directory of job ``job_id`` under ``base`` (a path on the chief, maybe starting with ``~``)."""

    def __init__(self, job_id, base=LOG_BASE, keep=KEEP):
        self.path = job_workdir(base, job_id)
        self._base = base
        self._keep = keep

    def create(self):
        """Make the directory (0700) after removing all but the ``keep - 1`` newest older ones."""
        base = os.path.expanduser(self._base)
        self._prune(base)
        path = os.path.expanduser(self.path)
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)   # makedirs' mode does not survive the umask
        return path

    def file(self, address, role):
        """The log of ``address``'s ``role`` (``server`` or ``worker``) process."""
        return os.path.join(os.path.expanduser(self.path), "{}-{}.log".format(address, role))

    def _prune(self, base):
        if not os.path.isdir(base):
            return
        own = os.path.basename(self.path)
        older = []
        for entry in os.scandir(base):
            if entry.name.startswith(_PREFIX) and entry.name != own and entry.is_dir(follow_symlinks=False):
                try:
                    older.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
                except FileNotFoundError:   # another job on this host pruned it meanwhile
                    continue
        older.sort(reverse=True)
        for _, path in older[max(self._keep - 1, 0):]:
            shutil.rmtree(path, ignore_errors=True)
