"""Helpers of the job-level tests: start a chief, read its output, find a job's processes.

``Chief`` starts a training script as a separate process (its own process
group, so the test can signal exactly it), collects its output lines with the
time each arrived, and parses the coordinator's ``[autodist] job <id>: ...``
line and every node's ``RESULT <json>`` line. ``job_processes(job_id)`` lists
the live processes that carry the job id in their command line or
environment: servers (``--job-id``), the other nodes' scripts
(``AUTODIST_JOB``) and the shells around them on SSH nodes.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
REPO = os.path.dirname(os.path.dirname(HERE))
_JOB_LINE = re.compile(r"\[autodist\] job (\S+): ")
_RESULT = re.compile(r"^(?:\[(?P<node>[^\]]+)\] )?RESULT (?P<json>\{.*\})$")


def linear_reference(seed, steps, batch=12, lr=0.1):
    """Single-device SGD on the whole batch, as job_linear.py's graph computes it (float64)."""
    rng = np.random.RandomState(seed)
    x = rng.rand(batch, 3).astype(np.float32).astype(np.float64)
    y = rng.rand(batch, 1).astype(np.float32).astype(np.float64)
    w = np.array([[0.5], [-0.3], [0.2]])
    losses = []
    for _ in range(steps):
        residual = x @ w - y
        losses.append((residual[:, 0] ** 2).tolist())
        w = w - lr * (2.0 / batch) * x.T @ residual
    return losses, w.ravel().tolist()


def npz_weights(path):
    """The arrays of an ``.npz`` file in the order they were saved (``scripts/plain_steps.py``'s results)."""
    with np.load(str(path)) as found:
        return [found[key] for key in sorted(found.files)]


def job_processes(job_id):
    """Pids of live (non-zombie) processes whose command line or environment names ``job_id``."""
    needle = job_id.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/{}/stat".format(entry), "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open("/proc/{}/cmdline".format(entry), "rb") as f:
                text = f.read()
            with open("/proc/{}/environ".format(entry), "rb") as f:
                text += f.read()
        except OSError:
            continue
        if needle in text:
            found.append(int(entry))
    return found


def wait_until(predicate, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def job_dir(job_id):
    return os.path.expanduser("~/.autodist/jobs/job-" + job_id)


def log_dir(job_id):
    return os.path.expanduser("~/.autodist/logs/job-" + job_id)


_NODE_LOG = re.compile(r"[^/]+-(server|worker)\.log\Z")


def assert_only_logs_left(job_id):
    """Nothing of the job is left but its node logs: the job directory is gone, the private log
    directory holds one log per launched process and nothing else."""
    assert not os.path.exists(job_dir(job_id))
    logs = log_dir(job_id)
    assert oct(os.stat(logs).st_mode & 0o777) == "0o700"
    names = os.listdir(logs)
    assert names and all(_NODE_LOG.match(name) and os.path.isfile(os.path.join(logs, name)) for name in names), names


def unreachable_second_node(spec_path):
    """Rewrite the spec at ``spec_path``: 127.0.0.2 is now reached over SSH at a port where nothing listens.

    A job started from the spec before keeps running; its next attempt reads the spec again, and its
    preflight cannot connect to the node, as to a machine that went away.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(spec_path, "w") as f:
        f.write("nodes:\n  - address: 127.0.0.1\n    chief: true\n  - address: 127.0.0.2\n    ssh_config: gone\n"
                "ssh:\n  gone:\n    port: {}\n    connect_timeout: 5\n".format(port))


class Chief:
    """A chief process running ``argv`` (after ``python``) in its own process group."""

    def __init__(self, argv, cwd=REPO, env=None):
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        full_env.update(env or {})
        self.proc = subprocess.Popen([sys.executable] + list(argv), cwd=cwd, env=full_env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.lines = []     # (time.monotonic(), line)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self._lock:
                self.lines.append((time.monotonic(), raw.decode("utf-8", "replace").rstrip("\n")))

    def output(self):
        with self._lock:
            return "\n".join(line for _, line in self.lines)

    def find(self, pattern):
        """(time, match) of the first line matching ``pattern``, or None."""
        regex = re.compile(pattern)
        with self._lock:
            for when, line in self.lines:
                match = regex.search(line)
                if match:
                    return when, match
        return None

    def wait_for(self, pattern, timeout):
        wait_until(lambda: self.find(pattern) or self.proc.poll() is not None, timeout)
        hit = self.find(pattern)
        if hit is None:
            raise AssertionError("no line matching {!r} within {} s (exit code {}); output:\n{}".format(
                pattern, timeout, self.proc.poll(), self.output()[-6000:]))
        return hit

    @property
    def job_id(self):
        hit = self.find(_JOB_LINE.pattern)
        return hit[1].group(1) if hit else None

    def wait(self, timeout):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("the chief did not exit within {} s; output:\n{}".format(
                timeout, self.output()[-6000:])) from None
        self._reader.join(5)
        return code

    def results(self):
        """{node (the chief: None): RESULT dict}."""
        found = {}
        with self._lock:
            lines = [line for _, line in self.lines]
        for line in lines:
            match = _RESULT.match(line)
            if match:
                found[match.group("node")] = json.loads(match.group("json"))
        return found

    def signal(self, sig=signal.SIGINT):
        os.kill(self.proc.pid, sig)

    def cleanup(self):
        """Kill what is left of this test's chief and of its job (only processes carrying its job id)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        if self.job_id:
            for pid in job_processes(self.job_id):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
