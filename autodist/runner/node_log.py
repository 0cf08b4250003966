"""A launched process's log file on the chief: owner-only, written best-effort.

The chief appends everything a process prints to a file of the job's log
directory (``autodist.runtime.launch.job_logs``). The file is created with mode 0600
(its directory is 0700): a job's output may hold data or secrets its script
prints.

Writing it must never cost the job. When a write fails (the disk is full, a
quota is reached, an I/O error) the file is closed and no longer written, and
the relay goes on: the process keeps its pipe, the console keeps showing its
lines, the tail an error quotes keeps its last lines. The chief's console
says so once per log directory, i.e. once per job, whichever process hit it
first::

    [autodist] node logs are no longer written: cannot write /home/me/.autodist/logs/job-.../127.0.0.2-worker.log: No space left on device; the job goes on, and the console still shows every node's lines
"""
import os
import threading

__all__ = ["NodeLog", "LOG_MODE"]

LOG_MODE = 0o600

_lost_lock = threading.Lock()
_lost_directories = set()   # directories whose logs stopped; the console was told


def _owner_only(path, flags):
    return os.open(path, flags, LOG_MODE)


class NodeLog:
    """An append-only text file that stops, once and said, at its first failed write.

    ``say(text)`` prints the chief's notice (``OutputPump`` writes it as an
    ``[autodist]`` line to the node's sink). The first failure in a directory is said; later ones there
    are silent.
    """

    def __init__(self, path, say):
        self.path = path
        self._say = say
        self._file = None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", opener=_owner_only)
            os.fchmod(self._file.fileno(), LOG_MODE)   # an existing file keeps its mode otherwise
        except OSError as error:
            self._stop(error, "create")

    @property
    def writing(self):
        return self._file is not None

    def write(self, text):
        """Append ``text`` and flush it (the log is current when the process dies); nothing once stopped."""
        if self._file is None:
            return
        try:
            self._file.write(text)
            self._file.flush()
        except OSError as error:
            self._stop(error, "write")

    def close(self):
        if self._file is not None:
            try:
                self._file.close()
            except OSError as error:   # the last flush failed: said like a failed write
                self._file = None
                self._stop(error, "write")
            self._file = None

    def _stop(self, error, what):
        if self._file is not None:
            try:
                self._file.close()   # closes the descriptor even when the flush inside fails again
            except OSError:
                pass
            self._file = None
        directory = os.path.dirname(os.path.abspath(self.path))
        with _lost_lock:
            if directory in _lost_directories:
                return
            _lost_directories.add(directory)
        reason = error.strerror or str(error) or type(error).__name__
        try:
            self._say("node logs are no longer written: cannot {} {}: {}; the job goes on, and the console still "
                      "shows every node's lines".format(what, self.path, reason))
        except (OSError, ValueError):   # the console is gone too: nothing left to tell
            pass
