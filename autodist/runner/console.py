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
"""
import importlib
import os
import re
import sys
import tempfile

__all__ = ["is_chatter", "NodeConsole", "quiet_tensorflow_start", "import_quietly"]

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
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            return importlib.import_module(name)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode("utf-8", "replace").splitlines()
                    if not is_chatter(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()
