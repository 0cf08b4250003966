"""The one place where argv lists become strings for a remote shell.

An SSH server hands the command string of an ``exec`` request to the user's
login shell, so everything we send is parsed once by that shell.  Every
argument, environment value and path is quoted here with ``shlex.quote``;
nothing else in autodist builds shell text (the srun runner's file steps,
``sh -c <text>``, take theirs from here too).  The only unquoted text is the
user's ``python_venv`` prefix (trusted configuration, e.g.
``source /opt/venv/bin/activate``), which runs as written.

``remote_command`` produces, for ``argv = ["python", "train.py"]``::

    { source /opt/venv/bin/activate                      <- prefix (optional)
    } && cd -- '/jobs/a b'                               <- cwd (optional)
      && env -- 'K=v'                                    <- environment
         setsid --wait                                   <- new session
         sh -c '<WRAPPER>' autodist-job 50               <- supervisor, grace in ticks
         python train.py; exit "$?"                      <- argv

(in reality one line after the prefix's closing brace).

The login shell forks the ``env ... setsid`` child inside its own process
group, so ``setsid`` needs no fork of its own: the child becomes leader of a
new session (pid == pgid) and, through ``sh`` and ``exec``, turns into the
user's program.  The login shell waits for it and exits with its status, or
``128 + N`` if a signal N ended it; that is what SSH reports.  (``--wait``
only matters if a shell ran the child as a group leader; ``setsid`` then forks
and waits, and reports a signal less cleanly.)

The wrapper prints ``__autodist_pgid__ <pgid>`` as its first line, starts a
small watchdog, then ``exec``s the user's argv, which keeps that pid.  The
watchdog sits in the same group reading the channel's stdin; the SSH server
closes that pipe when the command ends or the connection drops, and the
watchdog then sends TERM and CONT to the whole group (a stopped program acts on
the TERM at once), waits up to the grace period for the leader to go, and KILLs
the group (itself included).  So a remote job never outlives its connection, and
anything the user's process left behind in its group dies with it. (A watchdog
stopped with its whole group cannot act; the chief's ``kill_command``, which
also sends CONT, and the KILL after the grace still end such a group.)
"""
import os
import posixpath
import re
import shlex

__all__ = [
    "PGID_MARKER",
    "remote_command",
    "kill_command",
    "makedirs_command",
    "remove_tree_command",
    "write_file_command",
    "extract_tree_command",
    "check_removable",
    "parse_pgid_line",
    "quote_path",
    "validate_env",
    "validate_argv",
]

PGID_MARKER = "__autodist_pgid__"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TICK = 0.1  # seconds between liveness checks in the shell loops below

# $1 is the watchdog grace in ticks; the rest is the user's argv.  Background
# jobs of a non-interactive shell get /dev/null as stdin unless redirected
# explicitly, hence the copy of the channel's stdin on fd 3.  The watchdog
# ignores TERM so that it survives its own group-wide TERM and can escalate.
_WRAPPER = """g=$1; shift
printf '%s %s\\n' {marker} "$$"
exec 3<&0 </dev/null
( trap '' TERM INT HUP
  while read -r _ <&3; do :; done
  kill -s TERM -- "-$$"
  kill -s CONT -- "-$$"
  i=0
  while [ "$i" -lt "$g" ] && kill -s 0 "$$"; do sleep {tick}; i=$((i+1)); done
  kill -s KILL -- "-$$" ) >/dev/null 2>&1 &
exec 3<&-
exec "$@"
""".format(marker=PGID_MARKER, tick=_TICK)

# $1 is the pgid, $2 the grace in ticks.  TERM the group, CONT it (a stopped
# process, SIGSTOP or a stall, acts on the TERM only once it runs again), wait
# until its leader is gone or the grace is over, then KILL whatever is left.  Waiting on
# the leader rather than the group: orphaned members turn into zombies that an
# init which reaps lazily (as in containers) keeps in the group for a while.
# Exit 0 either way: a group that is already gone is the goal, not an error.
_KILL = """p=$1; g=$2
kill -s TERM -- "-$p" 2>/dev/null || exit 0
kill -s CONT -- "-$p" 2>/dev/null
i=0
while [ "$i" -lt "$g" ] && kill -s 0 "$p" 2>/dev/null; do sleep {tick}; i=$((i+1)); done
kill -s KILL -- "-$p" 2>/dev/null
exit 0
""".format(tick=_TICK)


def _check_text(what, value):
    if not isinstance(value, str):
        raise ValueError("{} must be a string, got {!r}".format(what, value))
    if "\x00" in value:
        raise ValueError("{} contains a NUL byte, which no process can receive: {!r}".format(
            what, value))
    return value


def validate_env(env):
    """Return ``env`` as a dict after checking every name and value.

    Names must match ``[A-Za-z_][A-Za-z0-9_]*`` (anything else cannot be
    exported reliably by every shell); the ValueError names the bad key.
    """
    checked = {}
    for key, value in dict(env or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError("environment variable name {!r} is invalid: names must match "
                             "[A-Za-z_][A-Za-z0-9_]*".format(key))
        checked[key] = _check_text("value of environment variable {}".format(key), value)
    return checked


def validate_argv(argv):
    """``argv`` as a list of strings (paths converted); a lone string is refused.

    Refusing ``"ls -l"`` matters: taken as a sequence it would be argv
    ``['l', 's', ' ', ...]``, and splitting it would need a shell's rules.
    """
    if isinstance(argv, (str, bytes)) or not argv:
        raise ValueError("argv must be a non-empty list of strings, got {!r}".format(argv))
    argv = [_check_text("argv[{}]".format(i), os.fspath(a) if isinstance(a, os.PathLike) else a)
            for i, a in enumerate(argv)]
    if not argv[0]:
        raise ValueError("argv[0] (the program) must not be empty")
    return argv


def quote_path(path):
    """Quote a remote path; a leading ``~`` or ``~/`` means the remote ``$HOME``.

    ``~/a b`` becomes ``"$HOME"'/a b'``: the home directory is expanded by the
    remote shell, the rest arrives verbatim.
    """
    _check_text("path", path)
    if not path:
        raise ValueError("path must not be empty")
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"' + shlex.quote(path[1:])
    return shlex.quote(path)


def _ticks(grace):
    if grace < 0:
        raise ValueError("grace must be >= 0 seconds, got {}".format(grace))
    return str(int(round(grace / _TICK)))


def remote_command(argv, env=None, cwd=None, prefix=None, grace=5.0):
    """Shell text that runs ``argv`` in its own session and reports its pgid.

    ``env`` values and ``cwd`` arrive verbatim; ``prefix`` (the user's
    ``python_venv``) runs first, as given, and must succeed.  ``grace`` is how
    long the watchdog waits between TERM and KILL when the connection closes.
    The first line the command prints is ``PGID_MARKER <pgid>`` (see
    ``parse_pgid_line``), unless the prefix or ``cd`` fails first.
    """
    argv = validate_argv(argv)
    env = validate_env(env)
    parts = []
    if prefix is not None and prefix.strip():
        parts.append("{{ {}\n}}".format(_check_text("python_venv prefix", prefix)))
    if cwd is not None:
        parts.append("cd -- " + quote_path(cwd))
    words = ["env", "--"]
    words += [shlex.quote("{}={}".format(k, v)) for k, v in env.items()]
    words += ["setsid", "--wait", "sh", "-c", shlex.quote(_WRAPPER), "autodist-job", _ticks(grace)]
    words += [shlex.quote(a) for a in argv]
    parts.append(" ".join(words))
    return " && ".join(parts) + '; exit "$?"'


def parse_pgid_line(line):
    """The pgid announced by ``line`` if it is the wrapper's marker line, else None."""
    fields = line.strip().split()
    if len(fields) == 2 and fields[0] == PGID_MARKER and fields[1].isdigit():
        pgid = int(fields[1])
        if pgid > 1:
            return pgid
    return None


def kill_command(pgid, grace=5.0):
    """Shell text that stops process group ``pgid``: TERM and CONT, up to ``grace`` s, KILL.

    Only a real group id (an int > 1) is accepted: ``kill -- -1`` or ``-0``
    would signal every process of the user or the caller's own group.
    """
    if isinstance(pgid, bool) or not isinstance(pgid, int) or pgid <= 1:
        raise ValueError("refusing to signal process group {!r}: not a valid pgid".format(pgid))
    return "sh -c {} autodist-kill {} {}".format(shlex.quote(_KILL), pgid, _ticks(grace))


def makedirs_command(path):
    return "mkdir -p -- " + quote_path(path)


def check_removable(path):
    """Return ``path`` unless removing it recursively is never intended.

    Refused: empty, ``.``, ``..`` or anything above, ``/``, the home directory.
    """
    _check_text("path", path)
    normal = posixpath.normpath(path) if path else ""
    if normal in ("", ".", "..", "/", "//", "~") or normal.startswith("../"):
        raise ValueError("refusing to remove {!r}: not a job directory".format(path))
    return path


def remove_tree_command(path):
    return "rm -rf -- " + quote_path(check_removable(path))


def write_file_command(path):
    """Shell text that writes its stdin to file ``path``, making the parent directories first."""
    quoted = quote_path(path)
    return 'mkdir -p -- "$(dirname -- {0})" && cat > {0}'.format(quoted)


def extract_tree_command(path):
    """Shell text that unpacks the tar stream on its stdin into directory ``path`` (made if missing)."""
    quoted = quote_path(path)
    return "mkdir -p -- {0} && tar -xf - -C {0}".format(quoted)
