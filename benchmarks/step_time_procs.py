"""The processes of one configuration, seen from the harness: start, pin, measure, stop.

Linux only (``/proc``, ``ss``, ``sched_setaffinity``).

Pinning. Each process belongs to a node (``None``: the single-process
reference, which gets every node's core). ``pin`` sets the affinity of every
thread of a process (``/proc/<pid>/task/*``): a thread created later inherits
the mask of the thread that creates it, so once all threads are pinned the
process stays pinned. Processes the harness starts are pinned right after
they start; processes they start themselves (autodist's chief launches the
other node's server and script, which inherit the chief's mask) are found as
descendants and pinned to their node's core while the job starts up, and every
thread of every process is pinned once more when worker 0 reports ``ready``,
before anything is measured.

CPU time: utime + stime of ``/proc/<pid>/stat`` (all threads of the process).

Traffic: ``ss -tinp`` lists every TCP socket with its owning process and the
kernel's per-socket ``bytes_sent`` counter (``tcp_info``; loopback sockets are
counted like any other). A snapshot maps (local, peer) -> (owner pid, bytes
sent); the difference of two snapshots, over the sockets the configuration's
processes own, is what they sent in between. A socket crosses nodes when its
owner and the owner of its other end (the socket with the endpoints swapped)
are on different nodes; the rest is traffic inside a node (e.g. autodist's
script talking to its node's server process).
"""
import dataclasses
import os
import re
import signal
import subprocess
import threading
import time

__all__ = ["Proc", "ProcessTable", "cpu_seconds", "thread_cpu_seconds", "thread_kind", "parse_ss", "pin", "socket_snapshot", "traffic"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PID = re.compile(r"pid=(\d+)")
_SENT = re.compile(r"\bbytes_sent:(\d+)")


def _stat_fields(pid):
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3 on), or None if it is gone."""
    try:
        with open("/proc/{}/stat".format(pid), "rb") as f:
            stat = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _alive(pid, start):
    fields = _stat_fields(pid)
    return fields is not None and fields[19] == start and fields[0] not in ("Z", "X")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (0 when it is gone)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS if fields else 0.0


_DIGITS = re.compile(r"[-_#]?\d+$")


def thread_cpu_seconds(pid):
    """``{tid: (kind, utime + stime)}`` of ``pid``'s threads, the kind being the thread's name
    (``/proc/<pid>/task/<tid>/comm``) without a trailing number, so a pool's threads add up
    (``tf_Compute``, ``grpc_global_tim``, ``python3`` -> ``python``); empty when the process is gone."""
    found = {}
    try:
        tids = os.listdir("/proc/{}/task".format(pid))
    except OSError:
        return found
    for tid in tids:
        try:
            with open("/proc/{}/task/{}/comm".format(pid, tid)) as f:
                name = thread_kind(f.read().strip())
            with open("/proc/{}/task/{}/stat".format(pid, tid), "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        found[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


def thread_kind(name):
    """A thread's kind: its name without a trailing number (``tf_Compute``, ``python3`` -> ``python``)."""
    return _DIGITS.sub("", name) or "?"


def pin(pid, cpus):
    """Set the CPU affinity of every thread of ``pid``; threads that vanish meanwhile are skipped."""
    try:
        tids = os.listdir("/proc/{}/task".format(pid))
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass


def _children():
    """ppid -> [pid] of every process on the machine."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


@dataclasses.dataclass
class Proc:
    """A process of the configuration: one the harness started (``popen``) or one of their descendants."""
    name: str
    pid: int
    start: str                 # start time (field 22 of stat): a reused pid is not ours
    node: object               # node index, or None: all nodes' cores
    children_node: object      # the node of the processes it starts
    popen: object = None
    tail: list = dataclasses.field(default_factory=list)


class ProcessTable:
    """Every process of one configuration, by pid, and how to pin, measure and stop them."""

    TAIL = 30   # output lines kept per started process, for error messages

    def __init__(self, cores, nodes, pinning):
        self._cores = cores
        self._nodes = nodes
        self._pinning = pinning
        self._lock = threading.Lock()
        self.procs = {}

    def cpus_of(self, node):
        """Node k's core: the k-th of ``cores`` (round robin); node None: every node's core."""
        nodes = range(self._nodes) if node is None else (node,)
        return {self._cores[k % len(self._cores)] for k in nodes}

    def start(self, name, argv, node, children_node, env, cwd, reporter, sink):
        """Start ``argv`` in its own session; its output lines go to ``sink(proc, line)``."""
        popen = subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True,
                                 stdin=subprocess.PIPE if reporter else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        fields = _stat_fields(popen.pid)
        proc = Proc(name, popen.pid, fields[19] if fields else "", node, children_node, popen)
        with self._lock:
            self.procs[proc.pid] = proc
        if self._pinning:
            pin(proc.pid, self.cpus_of(node))
        threading.Thread(target=self._read, args=(proc, sink), daemon=True,
                         name="step-time-{}".format(name)).start()
        return proc

    def _read(self, proc, sink):
        for raw in iter(proc.popen.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            proc.tail[:] = (proc.tail + [line])[-self.TAIL:]
            sink(proc, line)
        proc.popen.stdout.close()

    def discover(self):
        """Add the live descendants of the started processes (not yet known) to the table."""
        children = _children()
        with self._lock:
            queue = [p for p in self.procs.values() if p.popen is not None]
            while queue:
                parent = queue.pop()
                for pid in children.get(parent.pid, ()):
                    fields = _stat_fields(pid)
                    if pid not in self.procs and fields is not None:
                        self.procs[pid] = Proc("{}/{}".format(parent.name, pid), pid, fields[19],
                                               parent.children_node, parent.children_node)
                    if pid in self.procs:
                        queue.append(self.procs[pid])

    def pin_all(self):
        if not self._pinning:
            return
        for proc in list(self.procs.values()):
            pin(proc.pid, self.cpus_of(proc.node))

    def node_of(self):
        return {pid: proc.node for pid, proc in self.procs.items()}

    def cpu(self):
        return {pid: cpu_seconds(pid) for pid in self.procs}

    def wait_started(self, timeout):
        """Wait up to ``timeout`` s for the started processes to exit; the exit codes (None: still running)."""
        deadline = time.monotonic() + timeout
        started = [p for p in self.procs.values() if p.popen is not None]
        for proc in started:
            try:
                proc.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        return {p.name: p.popen.poll() for p in started}

    def stop(self, grace=10.0):
        """End every process of the table: SIGTERM to the started ones, SIGKILL to whatever is left."""
        self.discover()
        started = [p for p in self.procs.values() if p.popen is not None and p.popen.poll() is None]
        for proc in started:
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p.pid, p.start) for p in self.procs.values()):
            for proc in started:
                proc.popen.poll()
            time.sleep(0.1)
        for proc in self.procs.values():
            if _alive(proc.pid, proc.start):
                _signal(proc, signal.SIGKILL)
        for proc in started:
            try:
                proc.popen.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
            if proc.popen.stdin:
                proc.popen.stdin.close()


def _signal(proc, sig):
    if _alive(proc.pid, proc.start):
        try:
            os.kill(proc.pid, sig)
        except OSError:
            pass


def socket_snapshot(timeout=20.0):
    """(local, peer) -> (owner pids, bytes sent) of every TCP socket this user can see (``ss -tinp``)."""
    return parse_ss(subprocess.run(["ss", "-H", "-t", "-i", "-n", "-p"], capture_output=True, text=True,
                                   timeout=timeout, check=True).stdout)


def parse_ss(out):
    """``ss -H -t -i -n -p`` output -> {(local, peer): ([owner pid, ...], bytes sent)}.

    Each socket is a line ``STATE RECV-Q SEND-Q LOCAL PEER users:(("python",pid=N,fd=K),...)``
    followed by indented lines of ``tcp_info`` fields (``bytes_sent:B`` among them).
    """
    sockets, key = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            fields = line.split()
            key = (_endpoint(fields[3]), _endpoint(fields[4])) if len(fields) >= 5 else None
            if key is not None:
                sockets[key] = ([int(p) for p in _PID.findall(line)], 0)
        elif key is not None:
            sent = _SENT.search(line)
            if sent:
                sockets[key] = (sockets[key][0], int(sent.group(1)))
    return sockets


def _endpoint(text):
    """``[::ffff:127.0.0.1]:80`` and ``127.0.0.1:80`` alike -> ``127.0.0.1:80``."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    return "{}:{}".format(host[7:] if host.startswith("::ffff:") else host, port)


def traffic(before, after, node_of):
    """(all, cross-node) bytes sent between two snapshots by the sockets of the processes in ``node_of``."""
    def owner(sockets, key):
        return next((pid for pid in sockets.get(key, ((), 0))[0] if pid in node_of), None)
    total = cross = 0
    for key, (_, sent) in after.items():
        pid = owner(after, key)
        if pid is None:
            continue
        delta = sent - before[key][1] if key in before else sent
        total += delta
        peer = owner(after, (key[1], key[0]))
        if peer is not None and node_of[peer] != node_of[pid]:
            cross += delta
    return total, cross
