"""Who is up: the start-up barrier of a platform-started job, and the watch that gives the job one outcome.

Pods come up minutes apart and a pod's DNS name may resolve only once it is
up, so a process first waits until every server of the job is up and is this
job's (``await_peers``), bounded (``AutoDist(ready_timeout=)``, default 600 s),
saying every ``REPORT_EVERY`` s whom it still waits for and why::

    resolves            its name does not resolve yet
    accepts TCP         nothing listens there yet / unreachable
    speaks HTTP/2       it accepts connections but is no gRPC server (another program holds the port)
    is this job's       its TensorFlow server is not this job's process of that task
                        (``exchange.identity_problem``: a variable each process sets on its own server)

A listener that only accepts connections (another program on the port) would
otherwise count as up, and TensorFlow's session would then wait on it without
a bound. Nothing else in the job can wait forever for a server that never
comes: TensorFlow's session creation would.

While the job trains, ``PeerWatch`` checks that the servers it depends on
still accept connections: the chief watches every other node, the others
watch the chief (a server lives as long as its process: the platform stopped
it, or it crashed). When one is gone, ``failure()`` returns a
``RemoteWorkerError`` naming it; the session raises it at its next call (or
within a second in a call already waiting), and the process ends with
``EXIT_RETRY``: every process of the job stops within a few seconds, and the
platform's restart policy restarts the whole job.
"""
import socket
import sys
import threading
import time

from autodist.errors import RemoteWorkerError
from autodist.runtime.join.exchange import JoinError

__all__ = ["await_peers", "await_gone", "PeerWatch", "probe", "speaks_http2", "REPORT_EVERY"]

REPORT_EVERY = 10.0   # s between two "still waiting" lines
_CONNECT_TIMEOUT = 2.0


def probe(server):
    """None when ``"host:port"`` accepts a TCP connection, else why not (a short phrase)."""
    host, _, port = server.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror:
        return "its name does not resolve yet"
    reason = "unreachable"
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(_CONNECT_TIMEOUT)
            try:
                sock.connect(address)
                return None
            except ConnectionRefusedError:
                reason = "nothing listens there yet"
            except OSError as e:
                reason = "unreachable ({})".format(e.strerror or type(e).__name__)
    return reason


_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"   # + empty SETTINGS
_SETTINGS = 0x4


def speaks_http2(server, timeout=_CONNECT_TIMEOUT):
    """None when ``"host:port"`` answers HTTP/2's connection preface with its SETTINGS frame (a gRPC server, as
    TensorFlow's is), else why not. TensorFlow's own session would wait without a bound on a listener that
    accepts connections and never answers."""
    host, _, port = server.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.sendall(_HTTP2_PREFACE)
            head = sock.recv(9)
    except socket.timeout:
        head = b""
    except OSError as e:
        return "unreachable ({})".format(e.strerror or type(e).__name__)
    if len(head) < 4 or head[3] != _SETTINGS:
        return "it accepts connections but does not answer as a TensorFlow server (another program holds the port?)"
    return None


def await_peers(servers, names, timeout, say, interval=0.5, check=None,
                bound="AutoDist(ready_timeout=) or AUTODIST_READY_TIMEOUT"):
    """Wait until every ``servers`` entry (rank -> "host:port") is up, up to ``timeout`` s.

    ``names``: rank -> how to call it ("task 1 (10.0.0.2:29400)");
    ``check(rank)``: None when that server is this job's, else why not (after
    it accepts connections and speaks HTTP/2). Raises ``JoinError`` naming
    whoever is still missing at the bound (``bound``: what sets it, for the message).
    """
    start = time.monotonic()
    missing = dict(servers)
    next_report = start + REPORT_EVERY
    while True:
        reasons = {rank: _problem(rank, server, check) for rank, server in missing.items()}
        missing = {rank: servers[rank] for rank, reason in reasons.items() if reason is not None}
        if not missing:
            return time.monotonic() - start
        waited = time.monotonic() - start
        listing = "; ".join("{}: {}".format(names[rank], reasons[rank]) for rank in sorted(missing))
        if waited >= timeout:
            raise JoinError("the job did not come together within {:.0f} s: still waiting for {} (is that process "
                            "started, and its address right? the bound is {})".format(timeout, listing, bound))
        if time.monotonic() >= next_report:
            say("waiting for {} of {} processes ({:.0f} s of {:.0f}): {}".format(
                len(missing), len(servers), waited, timeout, listing))
            next_report += REPORT_EVERY
        time.sleep(interval)


def _problem(rank, server, check):
    """Why ``server`` does not count as up yet, or None."""
    reason = probe(server)
    if reason is None and check is not None:
        reason = speaks_http2(server) or check(rank)
    return reason


def await_gone(server, timeout, interval=0.2):
    """Wait until ``server`` no longer accepts connections (its process left), up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while probe(server) is None and time.monotonic() < deadline:
        time.sleep(interval)


class PeerWatch:
    """A daemon thread checking that the watched servers accept connections (module docstring).

    ``watched``: rank -> (name, "host:port"). A server that refuses or times
    out ``misses`` checks in a row is gone; ``stop()`` ends the watch (at the
    normal end, before the others are expected to leave).
    """

    def __init__(self, watched, interval=0.5, misses=3):
        self._watched = dict(watched)
        self._interval, self._misses = interval, misses
        self._failure = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autodist-peer-watch", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()

    def failure(self):
        return self._failure

    def _run(self):
        counts = {rank: 0 for rank in self._watched}
        while not self._stopped.wait(self._interval):
            for rank, (name, server) in self._watched.items():
                reason = probe(server)
                counts[rank] = counts[rank] + 1 if reason is not None else 0
                if counts[rank] >= self._misses and not self._stopped.is_set():
                    self._failure = RemoteWorkerError(name, reason="its TensorFlow server is gone ({}); the "
                                                                   "process stopped or its pod went away".format(reason))
                    print("autodist: {}: this process stops too, with the retry status".format(self._failure),
                          file=sys.stderr, flush=True)
                    return
