"""The job's node logs on the chief: one file per launched process, kept after the job ends.

The job directory on every node (``~/.autodist/jobs/job-<id>/``: the
strategy) is removed when the job ends; the full output of every process
the chief launched stays, on the chief, in::

    ~/.autodist/logs/                     mode 0700 (made so, with ~/.autodist, when missing)
        job-<id>/                         mode 0700
            .running                      while the job runs: locked (flock) by its chief
            127.0.0.2-worker.log          mode 0600: everything the node's script printed, chatter included

The console shows a node's own lines only (``autodist.runner.console``) and
names this directory when the job starts. The ``KEEP`` newest job log
directories are kept; older ones are removed when a job starts, except the
logs of a job that still runs.

Whether a job runs is its lock: the chief holds an exclusive ``flock`` on
the ``.running`` file of its directory from ``create`` to ``release`` (the
end of the job). The kernel drops the lock when the chief's process ends,
however it ends (a crash, SIGKILL), so a dead job never looks alive and a
live one never looks dead, whatever the clock says. The directory is made
under another name with its lock already held and then renamed into place,
so no job's directory is ever seen without its lock while the job runs; the
file is removed when the job ends.

Writing the logs is best-effort (``autodist.runner.node_log``): when the
disk is full the job goes on, and the console says once that its logs are no
longer written. A log directory that cannot be made is said the same way.
"""
import fcntl
import os
import shutil

from autodist.fileio import make_private_dirs
from autodist.runner.allocation import job_workdir

__all__ = ["JobLogs", "LOG_BASE", "KEEP", "LOCK_FILE"]

LOG_BASE = "~/.autodist/logs"
KEEP = 20
LOCK_FILE = ".running"
_PREFIX = "job-"


def _held_by_a_live_job(directory):
    """True when the chief of the job whose logs are in ``directory`` still runs."""
    try:
        fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY)
    except FileNotFoundError:   # the job has ended (or another job pruned it meanwhile)
        return False
    except OSError:
        return True   # cannot tell: keep it
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:   # EWOULDBLOCK: its chief holds the lock
        return True
    finally:
        os.close(fd)   # drops our probe's lock with it


class JobLogs:
    """The log directory of job ``job_id`` under ``base`` (a path on the chief, maybe starting with ``~``)."""

    def __init__(self, job_id, base=LOG_BASE, keep=KEEP):
        self.path = job_workdir(base, job_id)
        self._base = base
        self._keep = keep
        self._lock = None   # the descriptor holding this job's lock, while it runs
        self._made = False

    def create(self):
        """Make the directory (0700) and lock it as running, after removing all but the ``keep - 1`` newest
        older ones that are not running. Raises ``OSError`` when the directory cannot be made."""
        base = os.path.expanduser(self._base)
        self._prune(base)
        path = os.path.expanduser(self.path)
        make_private_dirs(base)
        # Made under another name with its lock held, then renamed into place: a job's directory is never
        # seen without its lock while the job runs.
        starting = os.path.join(base, ".starting-" + os.path.basename(path))
        os.mkdir(starting, 0o700)
        try:
            os.chmod(starting, 0o700)
            self._lock = os.open(os.path.join(starting, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)   # a new file nobody else locks: does not wait
            os.rename(starting, path)
        except OSError:
            self.release()
            shutil.rmtree(starting, ignore_errors=True)
            raise
        self._made = True
        return path

    def start(self):
        """``create`` for a job, best-effort: the words of the job's first console line about its logs.

        A directory that cannot be made (a full disk, a read-only home) leaves
        the job without logs, not without its run: ``file`` is None then.
        """
        try:
            self.create()
        except OSError as error:
            self.release()
            return "node logs not written (cannot create {}: {})".format(self.path, error.strerror or error)
        return "node logs in {}".format(self.path)

    def release(self):
        """The job has ended: its logs may be pruned by later jobs (the lock file goes). Idempotent."""
        if self._lock is not None:
            try:
                os.unlink(os.path.join(os.path.expanduser(self.path), LOCK_FILE))
            except OSError:   # removed by hand: the lock goes with the descriptor all the same
                pass
            os.close(self._lock)
            self._lock = None

    def file(self, address, role):
        """The log of ``address``'s ``role`` (``server`` or ``worker``) process; None without a directory."""
        if not self._made:
            return None
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
            if not _held_by_a_live_job(path):
                shutil.rmtree(path, ignore_errors=True)
