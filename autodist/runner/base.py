"""The narrow interface the coordinator launches through.

A ``Runner`` is one node: ``run(argv, env, cwd) -> ProcessHandle`` plus the few
file operations a job needs (``copy``, ``makedirs``, ``remove_tree``).  The
local and SSH implementations behave the same way, and tests swap in a
recording fake (``tests/recording_runner.py``).

Every started process leads its own process group.  ``ProcessHandle`` reports
exit codes in the shell's convention, which is also what SSH delivers: the
exit status, or ``128 + N`` when a signal N ended the process;
``CONNECTION_LOST`` (255, like ``ssh`` itself) when the connection to the node
dropped before an exit status arrived.
"""
import abc
import codecs
import collections
import sys
import threading
import time

from autodist.errors import RemoteWorkerError
from autodist.runner.frames import FrameSplitter
from autodist.runner.node_log import NodeLog

__all__ = ["Runner", "ProcessHandle", "EventProcessHandle", "OutputPump", "run_for_output", "wait_until", "run_bounded",
           "write_line", "DISCARD", "CONNECTION_LOST", "MAX_TAIL_LINES", "MAX_LINE", "ANNOUNCE"]

CONNECTION_LOST = 255
MAX_TAIL_LINES = 1000
MAX_LINE = 65536        # characters of one line that reach the console and the tail (the log gets all of it)
ANNOUNCE = "autodist"   # the prefix of the chief's own lines (``runtime.notices`` uses it too)

# One lock for every sink write, so lines of different nodes never interleave
# within a line. Re-entrant: a signal handler (a stop's line) runs in the main
# thread, possibly while that thread is inside a write.
_SINK_LOCK = threading.RLock()


class _Discard:
    """A sink that drops every line (the handle still keeps its tail)."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


DISCARD = _Discard()


def write_line(name, sink, line):
    """Write ``[name] line`` to ``sink`` (None: the current ``sys.stdout``)."""
    sink = sink if sink is not None else sys.stdout
    with _SINK_LOCK:
        sink.write("[{}] {}\n".format(name, line))
        sink.flush()


class OutputPump:
    """Splits a byte stream into lines and fans them out.

    Framed reports (``autodist.runner.frames``) are taken out first; the
    latest is kept (``report``). Each complete line goes to ``intercept``
    (which may swallow it, e.g. the pgid marker), then to the sink as
    ``[name] line`` and to ``log_path`` as is (``runner.node_log``: mode 0600,
    best-effort: a full disk stops the log, never the relay), and into a
    bounded buffer that ``tail`` reads.  ``sink=None`` means whatever
    ``sys.stdout`` is at the time of writing. A sink with a ``shows(line)``
    method (``console.NodeConsole``) gets only the lines it shows, and so do
    lines for which ``hide(line)`` is true; the log and the tail keep every line.

    Time is linear in the output's length: a line that arrives in many chunks
    is kept in pieces and joined once. A line longer than ``MAX_LINE``
    characters goes whole to the log, written as it arrives; the console and
    the tail get its first ``MAX_LINE`` characters and a marker saying so.
    """

    def __init__(self, name, sink=None, log_path=None, intercept=None, hide=None):
        self.name = name
        self._sink = sink
        self._shows = getattr(sink, "shows", None)
        self._intercept = intercept
        self._hide = hide
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._frames = FrameSplitter()
        self._report = None   # (time.monotonic() when received, report dict)
        self._pieces = []     # the line being received, in pieces
        self._length = 0      # its length so far
        self._cut = False     # it passed MAX_LINE: its head is in _pieces, the whole of it in the log
        self._lines = collections.deque(maxlen=MAX_TAIL_LINES)
        self._lock = threading.Lock()
        self._log = None
        if log_path is not None:
            self._log = NodeLog(log_path, lambda text: write_line(ANNOUNCE, self._sink, text))

    def feed(self, data):
        text, reports = self._frames.split(self._decoder.decode(data))
        if reports:
            self._report = (time.monotonic(), reports[-1])
        with self._lock:
            *complete, rest = text.split("\n")
            for piece in complete:
                self._add(piece)
                self._end_line()
            self._add(rest)

    def close(self):
        """Flush a last unterminated line and close the log file; idempotent."""
        with self._lock:
            self._add(self._decoder.decode(b"", final=True))
            if self._length:
                self._end_line()
            if self._log is not None:
                self._log.close()
                self._log = None

    def _add(self, piece):
        """More of the line being received (no newline in ``piece``)."""
        if not piece:
            return
        self._length += len(piece)
        if self._cut:
            self._write_log(piece)
            return
        self._pieces.append(piece)
        if self._length > MAX_LINE:
            whole = "".join(self._pieces)
            self._write_log(whole)
            self._pieces, self._cut = [whole[:MAX_LINE]], True

    def _end_line(self):
        line, length, cut = "".join(self._pieces), self._length, self._cut
        self._pieces, self._length, self._cut = [], 0, False
        if not cut:
            self._emit(line.rstrip("\r"))
            return
        self._write_log("\n")
        self._keep(line + " [autodist: line cut here: the first {} of its {} characters; the whole line is in "
                          "the node's log]".format(MAX_LINE, length))

    def _emit(self, line):
        if self._intercept is not None and self._intercept(line):
            return
        self._write_log(line + "\n")
        self._keep(line)

    def _keep(self, line):
        """``line`` into the tail and, unless it is hidden, onto the console."""
        self._lines.append(line)
        if (self._shows is None or self._shows(line)) and not (self._hide is not None and self._hide(line)):
            write_line(self.name, self._sink, line)

    def _write_log(self, text):
        if self._log is not None:
            self._log.write(text)

    def tail(self, n=20, shown=False):
        """The last ``n`` lines; ``shown``: of those the sink shows (no chatter, no internal lines)."""
        with self._lock:
            lines = list(self._lines)
        if shown and self._shows is not None:
            lines = [line for line in lines if self._shows(line)]
        return "\n".join(lines[-n:] if n > 0 else [])

    @property
    def report(self):
        """``(received, report)``: the latest framed report and when it arrived (monotonic); or None."""
        return self._report


class ProcessHandle(abc.ABC):
    """A process started by a runner, leader of its own process group.

    ``pid == pgid``; on an SSH node both are the remote ids, known once the
    process has announced them (None before).  ``poll``/``wait`` return the
    exit code described in the module docstring; after a dropped connection
    that is ``CONNECTION_LOST`` and ``connection_lost`` is True.  ``terminate``
    only ever signals this process's group, is idempotent, and returns the
    final exit code (None if the process could not be confirmed dead).
    """

    name = ""
    pid = None
    pgid = None
    connection_lost = False

    def __init__(self, name, argv, pump):
        self.name = name
        self.argv = list(argv)
        self._pump = pump

    @abc.abstractmethod
    def poll(self):
        """The exit code, or None while the process runs."""

    @abc.abstractmethod
    def wait(self, timeout=None):
        """Wait up to ``timeout`` seconds (None: until exit); the exit code or None."""

    @abc.abstractmethod
    def terminate(self, grace=5.0):
        """TERM the process group, KILL it after ``grace`` seconds."""

    def tail(self, n=20, shown=False):
        """The last ``n`` lines of output (the pgid marker excluded); ``shown``: of the lines the console
        shows (no TensorFlow chatter, no internal lines such as the server's ready line, unless verbose)."""
        return self._pump.tail(n, shown)

    @property
    def report(self):
        """The process's latest report (``autodist.runner.frames``) as ``(received, dict)``, or None."""
        return self._pump.report

    def failure(self, reason=""):
        """A ``RemoteWorkerError`` describing how this process ended."""
        code = self.poll()
        if not reason and self.connection_lost:
            reason = "lost its connection (exit code {})".format(code)
        return RemoteWorkerError(self.name, exit_code=code, log_tail=self.tail(shown=True), reason=reason)

    def __repr__(self):
        return "<{} {} pid={} pgid={} code={}>".format(
            type(self).__name__, self.name, self.pid, self.pgid, self.poll())


class EventProcessHandle(ProcessHandle):
    """A handle whose exit is an event: subclasses set ``_code``, then ``_done``."""

    def __init__(self, name, argv, pump):
        super().__init__(name, argv, pump)
        self._code = None
        self._done = threading.Event()

    def poll(self):
        return self._code if self._done.is_set() else None

    def wait(self, timeout=None):
        self._done.wait(timeout)
        return self.poll()


class Runner(abc.ABC):
    """One node of the job.  ``name`` prefixes its output lines.

    Paths are the node's paths; on a remote node ``~/`` means the remote home.
    ``log_path`` of ``run`` is a file on the machine running the runner (the
    chief), where that process's output is appended.
    """

    name = ""
    python_venv = None

    def connect(self):
        """Make sure the node is reachable; raises ``LaunchError`` with the reason."""

    @abc.abstractmethod
    def run(self, argv, env=None, cwd=None, log_path=None, sink=None):
        """Start ``argv`` in its own process group; returns a ``ProcessHandle``."""

    @abc.abstractmethod
    def copy(self, local_src, remote_dst):
        """Copy a local file or directory tree to ``remote_dst`` on the node."""

    @abc.abstractmethod
    def makedirs(self, path):
        """Create ``path`` and its parents on the node (no error if it exists)."""

    @abc.abstractmethod
    def remove_tree(self, path):
        """Remove ``path`` recursively on the node (no error if it is missing)."""

    def unreachable(self, timeout=3.0):
        """Why the node cannot be reached now, or None (this machine, or a node that answers)."""
        return None

    def close(self):
        """Release connections.

        Local processes are not touched; remote ones end with the connection
        they were started through (see ``shell``), so terminate first.
        """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<{} {}>".format(type(self).__name__, self.name)


def run_for_output(runner, argv, timeout, env=None, cwd=None):
    """Run ``argv`` on ``runner`` without echoing it and collect its output: ``(exit_code, output)``.

    The exit code is None if the command did not finish within ``timeout``
    seconds, in which case it has been terminated.  Output is the last
    ``MAX_TAIL_LINES`` lines.
    """
    handle = runner.run(argv, env=env, cwd=cwd, sink=DISCARD)
    code = handle.wait(timeout=max(timeout, 0.0))
    if code is None:
        handle.terminate(grace=1.0)
    return code, handle.tail(MAX_TAIL_LINES)


def wait_until(predicate, timeout, interval=0.05):
    """Poll ``predicate`` until true or ``timeout`` seconds; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def run_bounded(fn, timeout, name="autodist-bounded"):
    """Call ``fn()`` on a daemon thread and wait up to ``timeout`` s; True if it returned (or raised) in time.

    For calls into TensorFlow that may wait forever in C++ (closing a session
    whose step waits on a node that is gone): the caller's thread stays
    interruptible and a call that does not return is left on its daemon
    thread, which does not keep the process alive. Exceptions of ``fn`` are
    not propagated.
    """
    def call():
        try:
            fn()
        except Exception:  # noqa: BLE001 - a failed close is a finished close
            pass
    thread = threading.Thread(target=call, name=name, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()
