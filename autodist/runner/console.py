"""What reaches the chief's console: the nodes' own output, without TensorFlow's start-up chatter.

Every process that imports TensorFlow 2.21 writes, before its logging is set
up and whatever ``TF_CPP_MIN_LOG_LEVEL`` says, lines such as::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795547531.316711   10739 port.cc:153] oneDNN custom operations are on. ...

and a launched server announces ``AUTODIST_SERVER_READY <port>`` to the
coordinator. Two places keep them off the console:

- the other nodes' lines pass through the chief's ``OutputPump``, whose sink
  may refuse a line (``NodeConsole.shows``): a refused line still goes to the
  node's log file and to the tail an error quotes, only not to the console;
- the chief's own process prints its lines at ``import tensorflow``, before
  autodist runs: a program calls ``quiet_tensorflow_start()`` first thing
  (``autodist run`` and the examples do), which imports TensorFlow with
  file descriptor 2 caught and then writes back every line that is not
  chatter. Importing this module does nothing of the kind.

TensorFlow's warnings and errors (glog lines ``W...``, ``E...``, ``F...``,
Python's ``WARNING:tensorflow:...``) are not chatter, except the warning
TensorFlow 2.21 logs when it cleans up a finished step's rendezvous
(``Local rendezvous is aborting with status: ABORTED: Cleanup ...``), which
says nothing about the job. ``verbose`` shows everything.

And the chief's own lines stay whole while it relays the others' (``WholeLines``).
"""
import importlib
import os
import re
import sys
import tempfile
import threading

__all__ = ["is_chatter", "NodeConsole", "quiet_tensorflow_start", "import_quietly", "call_quietly", "WholeLines"]

# glog's prefix: severity, date (month, day), time (absl's seconds may run long), thread, file:line]
_GLOG = re.compile(r"^(?P<severity>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] ")
_BENIGN_WARNINGS = ("Local rendezvous is aborting with status: ABORTED: Cleanup",)
_CHATTER = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    # cpu_feature_guard's second line, printed without a prefix of its own
    "To enable the following instructions:",
)


def is_chatter(line):
    """True for TensorFlow's informational C++ log lines and its start-up notices."""
    match = _GLOG.match(line)
    if match is not None:
        return match.group("severity") == "I" or (
            match.group("severity") == "W" and line[match.end():].startswith(_BENIGN_WARNINGS))
    return line.startswith(_CHATTER)


class NodeConsole:
    """A sink for ``OutputPump`` that shows a node's own lines and refuses chatter and ``hidden`` prefixes.

    ``stream`` None means whatever ``sys.stdout`` is when a line is written
    (so a progress display that redirects it keeps working). ``verbose``
    shows every line.
    """

    def __init__(self, stream=None, verbose=False, hidden=()):
        self._stream = stream
        self.verbose = verbose
        self._hidden = tuple(hidden)

    def shows(self, line):
        return self.verbose or not (is_chatter(line) or (self._hidden and line.startswith(self._hidden)))

    def write(self, text):
        return (self._stream if self._stream is not None else sys.stdout).write(text)

    def flush(self):
        (self._stream if self._stream is not None else sys.stdout).flush()


def quiet_tensorflow_start(verbose=False):
    """Import TensorFlow without its start-up chatter on this process's stderr; call it first thing.

    For programs, not libraries: it imports TensorFlow now, with file
    descriptor 2 pointed at a temporary file, then writes every line caught
    that is not chatter (``is_chatter``) to stderr, so an import error or a
    warning is still seen. It also sets ``TF_CPP_MIN_LOG_LEVEL`` to 2
    unless the environment sets it: TensorFlow's C++ logs below errors stay
    hidden afterwards in this process (its Python warnings still show); the
    processes it launches on this machine inherit that. ``verbose``: do
    nothing (everything is shown). A second call does nothing.
    """
    if verbose or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import_quietly("tensorflow")


def import_quietly(name):
    """Import module ``name`` with file descriptor 2 caught; write back the lines that are not chatter."""
    return call_quietly(importlib.import_module, name)


def call_quietly(fn, *args, dropped=()):
    """``fn(*args)`` with file descriptor 2 caught; then write back the lines that are not chatter and, when ``fn``
    raised, do not contain one of ``dropped`` (TensorFlow's own lines of an error autodist reports itself)."""
    sys.stderr.flush()
    saved = os.dup(2)
    failed = True
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            result = fn(*args)
            failed = False
            return result
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode("utf-8", "replace").splitlines() if not is_chatter(line)
                    and not (failed and any(d in line for d in dropped))]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()


class WholeLines:
    """A text stream that passes each thread's lines on whole.

    ``print`` writes its text and its newline in two calls; when another
    thread (the chief's relay of the other nodes' lines) writes in between,
    the two lines run together (``loss=0.31[127.0.0.2] loss=0.29``). While
    the chief relays, its ``sys.stdout`` is one of these (``install``): a
    thread's unfinished line waits until its newline, or until that thread
    flushes. Everything else (``fileno``, ``isatty``, ``encoding`` ...) is the
    wrapped stream's.

    Its lock is held only around writes to the wrapped stream, never while
    calling anything that takes another lock: the relay's ``write_line`` holds
    ``runner.base``'s sink lock and the live progress line holds rich's locks while they
    write here, so a lock of theirs taken in here would deadlock the two.
    """

    def __init__(self, stream):
        self.stream = stream
        self._partial = {}   # thread ident -> its unfinished line
        self._lock = threading.Lock()

    @classmethod
    def install(cls):
        """Make ``sys.stdout`` one, unless it is already; returns the one installed, or None."""
        if isinstance(sys.stdout, cls) or sys.stdout is None:
            return None
        sys.stdout = cls(sys.stdout)
        return sys.stdout

    def uninstall(self):
        """Give ``sys.stdout`` back (if it is still this) and write what is left of every thread's line:
        the other threads' each on a line of its own, the calling thread's last, unfinished, for its
        next write to finish."""
        with self._lock:
            if sys.stdout is self:
                sys.stdout = self.stream
            own = self._partial.pop(threading.get_ident(), "")
            rest = "".join(line + "\n" for line in self._partial.values()) + own
            self._partial = {}
            try:
                if rest:
                    self.stream.write(rest)
                self.stream.flush()
            except (OSError, ValueError):   # the stream was closed under us: nothing can be shown anyway
                pass

    def write(self, text):
        key = threading.get_ident()
        with self._lock:
            done, newline, rest = (self._partial.pop(key, "") + text).rpartition("\n")
            if rest:
                self._partial[key] = rest
            if newline:
                self.stream.write(done + newline)
        return len(text)

    def flush(self):
        with self._lock:
            partial = self._partial.pop(threading.get_ident(), "")
            if partial:
                self.stream.write(partial)
            self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)
