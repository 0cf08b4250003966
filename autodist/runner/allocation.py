"""Per-job identity: an id, a working directory and ports that no other job shares.

Two jobs on one host must not collide: the id mixes the start time with 32
random bits, the working directory is named after the id, and ports come from
the kernel (bind to port 0), several at once so that they are distinct::

    job_id = new_job_id()                       # '20250101-120000-3f9a1c2e'
    workdir = job_workdir("/tmp/autodist", job_id)   # '/tmp/autodist/job-20250101-...'
    port, = free_ports(runner, exclude=taken)   # a port free on runner's node
    hold = PortHold(runner, exclude=taken)      # the same, kept from other jobs until hold.release()

A port is free only until someone binds it, and the servers bind theirs
seconds after the pick (a node's script starts first). Another job on the
same machine picking meanwhile could get the same port from the kernel, and
one of the two servers then fails to start. ``PortHold`` keeps the port bound
in this process (``SO_REUSEADDR``, never listening) until the job's servers
listen: the kernel gives a held port to no ``bind(("", 0))``, nor to an
explicit bind without ``SO_REUSEADDR``, while a TensorFlow server (gRPC sets
``SO_REUSEADDR``) binds it. It holds the ports of nodes on this machine's
network stack: the local ones and loopback addresses (reached over SSH or
not); a node elsewhere picks its port remotely, unheld.
"""
import ipaddress
import posixpath
import re
import secrets
import socket
import time
from contextlib import ExitStack

from autodist.errors import LaunchError
from autodist.runner.base import run_for_output
from autodist.runner.local import LocalRunner

__all__ = ["new_job_id", "job_workdir", "workdir_argv", "free_ports", "free_port", "PortHold", "release_ports"]

_JOB_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{8}\Z")
_ATTEMPTS = 5

# Binds all `count` sockets before printing, so the ports are distinct.  The
# wildcard address matches TensorFlow's servers, which always listen on
# 0.0.0.0.
_PORTS_SNIPPET = """import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
"""


def new_job_id():
    return "{}-{}".format(time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(4))


def job_workdir(base, job_id):
    """The job's own directory under ``base`` (a path on the node)."""
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise ValueError("{!r} is not a job id made by new_job_id()".format(job_id))
    return posixpath.join(base, "job-" + job_id)


# Creates the job directory, and each missing directory above it (~/.autodist,
# ~/.autodist/jobs), readable by their owner only: other users cannot list job
# ids. os.makedirs' mode does not survive the umask, hence the chmod; argv[1]
# may start with "~".
_MAKE_WORKDIR = """import os, sys
path, missing = os.path.expanduser(sys.argv[1]), []
while path and not os.path.isdir(path):
    missing.append(path)
    path = os.path.dirname(path)
for path in reversed(missing):
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
"""


def workdir_argv(python, path):
    """The command that makes the job directory ``path`` on a node (mode 0700, missing parents too)."""
    return [python, "-c", _MAKE_WORKDIR, path]


def _local_ports(count):
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]


def _remote_ports(runner, count, python, timeout):
    code, output = run_for_output(runner, [python, "-c", _PORTS_SNIPPET, str(count)], timeout)
    fields = output.strip().splitlines()[-1].split() if output.strip() else []
    if code != 0 or len(fields) != count or not all(f.isdigit() for f in fields):
        raise LaunchError("{}: cannot pick free ports with {} (exit code {}): {}".format(
            runner.name, python, code, output.strip()[-300:] or "no output"))
    return [int(f) for f in fields]


def free_ports(runner=None, count=1, exclude=(), python="python3", timeout=30.0):
    """``count`` distinct ports free right now on ``runner``'s node, none in ``exclude``.

    ``runner`` None or a ``LocalRunner`` means this machine.  Pass the ports
    already chosen for other nodes on the same machine (loopback clusters) as
    ``exclude``.  A port is only free until someone binds it: start the server
    soon after.
    """
    if count < 1:
        raise ValueError("count must be >= 1, got {}".format(count))
    exclude = set(exclude)
    for _ in range(_ATTEMPTS):
        if runner is None or isinstance(runner, LocalRunner):
            ports = _local_ports(count)
        else:
            ports = _remote_ports(runner, count, python, timeout)
        if not exclude.intersection(ports):
            return ports
    raise LaunchError("{}: no {} free port(s) outside {} after {} attempts".format(
        getattr(runner, "name", "localhost"), count, sorted(exclude), _ATTEMPTS))


def free_port(runner=None, exclude=(), python="python3", timeout=30.0):
    return free_ports(runner, 1, exclude, python, timeout)[0]


class PortHold:
    """A port free on ``runner``'s node (``port``), held from other jobs until ``release()`` (module docstring)."""

    def __init__(self, runner=None, exclude=(), python="python3", timeout=30.0):
        self._socket = None
        if not _on_this_stack(runner):
            self.port = free_port(runner, exclude, python, timeout)
            return
        for _ in range(_ATTEMPTS):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", 0))
            if sock.getsockname()[1] not in set(exclude):
                self._socket, self.port = sock, sock.getsockname()[1]
                return
            sock.close()
        raise LaunchError("{}: no free port outside {} after {} attempts".format(
            getattr(runner, "name", "localhost"), sorted(exclude), _ATTEMPTS))

    @property
    def held(self):
        return self._socket is not None

    def release(self):
        """Let the port go (idempotent): its server listens now, or will never."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def release_ports(holds):
    """``release()`` every ``PortHold`` of ``holds``."""
    for hold in holds:
        hold.release()


def _on_this_stack(runner):
    """Whether ``runner``'s node shares this process's network stack: a local runner, or a loopback address."""
    if runner is None or isinstance(runner, LocalRunner):
        return True
    try:
        return ipaddress.ip_address(getattr(runner, "address", None) or runner.name).is_loopback
    except ValueError:
        return False
