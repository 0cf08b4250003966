"""Atomic file writes (a reader sees the old file or the new one, never half of one) and private directories."""
import os
import tempfile

__all__ = ["atomic_write_bytes", "make_private_dirs"]


def make_private_dirs(path):
    """Make directory ``path`` and each missing parent with mode 0700 (``os.makedirs``' mode is cut by the
    umask and not given to parents): ``~/.autodist`` and what autodist keeps in it are its user's only."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)


def atomic_write_bytes(path, data, mode=0o600):
    """Write ``data`` to ``path`` through a temporary file in the same directory.

    The file is flushed and fsynced before it replaces ``path``, so a crash
    leaves either the previous content or the complete new one.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
