"""The probe at planning time: a cluster that was never calibrated is measured once, then cached.

    calibration = calibration_for_planning(spec)    # the cache, else a probe now (cached), else the prior

A job's chief planning with ``AutoStrategy`` hands this to the builder before
it launches the job (``runtime.strategy_handoff.keep_calibration``:
``builder.job_calibration(spec, measure=calibration_for_planning)``; the
builder calls it unless ``probe=False``): for a cluster without a cache it
runs ``autodist calibrate`` (``probe.py``) in a
child process, which starts a TensorFlow server on every node as a job does,
measures the transport and writes the cache every later plan reads. A child,
because the probe's chief server lives as long as its process, and the
job's own server starts in the chief's process next. Nothing else probes:
``autodist plan``, the other nodes and ``probe=False`` plan with the cache or
the prior. The probe takes 15-30 s on two
nodes; the lines before and after it say so, and a line before each of its measurements. A probe that fails or runs
longer than ``probe_timeout(spec)`` is stopped, and the plan uses the spec's prior
(``network_bandwidth`` and fixed figures), with a line that says why and how
to measure again (``autodist calibrate -r SPEC``). The child asks the kernel
for a signal when its parent dies (``stop_with_parent``), so a chief killed
mid-probe leaves no probe behind: the child stops as SIGTERM stops a probe,
with the nodes it started.
"""
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from autodist.strategies.cost.calibration import Calibration, calibration_path, load_calibration, prior_calibration

__all__ = ["calibration_for_planning", "probe_in_child", "probe_timeout", "stop_with_parent", "PROBE_TIMEOUT",
           "PROBE_S_PER_NODE"]

#: Seconds the planning-time probe may take before it is stopped, at least (two loopback nodes: about 17 s).
PROBE_TIMEOUT = 300.0
#: Seconds a node, the bound from six nodes on. An estimate, not yet checked on the cell that ran past 300 s:
#: emulated hosts sharing two cores probed 2, 4 and 8 hosts in about 35, 80 and 280 s (8 at 779 Mbit/s), faster
#: than linear in the nodes; 8 at 616 Mbit/s ran past 300 s in both runs of a cell, which AutoStrategy then
#: planned with the spec's prior (docs/performance.md, phase 13). On separate machines a probe's rings grow
#: with the nodes (2 (N - 1) steps each) and its link pairs stop at 4 nodes.
PROBE_S_PER_NODE = 60.0

#: Seconds a stopped probe gets to stop its nodes' processes before it is killed.
_STOP_GRACE = 30.0
#: prctl(2): the signal this process gets when the thread that started it ends (Linux).
_PR_SET_PDEATHSIG = 1
#: The signal the kernel sends a probe child whose parent ended.
_PARENT_GONE = signal.SIGUSR2


def probe_timeout(spec):
    """The bound on ``spec``'s planning-time probe: ``PROBE_TIMEOUT``, or ``PROBE_S_PER_NODE`` a node where
    that is more (8 nodes: 480 s)."""
    return max(PROBE_TIMEOUT, PROBE_S_PER_NODE * len(spec.nodes))


def calibration_for_planning(spec, probe=True, say=None):
    """The probe's cache for ``spec``; without one, a probe now (``probe``) or the spec's prior.

    ``say(text)`` shows what happens (default: a line on stderr)."""
    cached = load_calibration(spec)
    if cached is not None or not probe:
        return cached or prior_calibration(spec)
    say = say or _to_stderr
    say("AutoStrategy: measuring the cluster of {} ({}) once for the cost model (autodist calibrate; cached in "
        "{}) ...".format(spec.path, " ".join(spec.nodes), calibration_path(spec)))
    started = time.monotonic()
    try:
        found = probe_in_child(spec, timeout=probe_timeout(spec), relay=lambda line: say("AutoStrategy: " + line))
    except (ProbeFailed, OSError) as e:   # OSError: the spec's copy could not be written
        say("AutoStrategy: the probe failed ({}); planning with the spec's prior figures instead. Measure the "
            "cluster with: autodist calibrate -r {}".format(e, spec.path))
        return prior_calibration(spec)
    say("AutoStrategy: cluster measured in {:.0f} s".format(time.monotonic() - started))
    return found


class ProbeFailed(Exception):
    """The child probe ended without a calibration; the message says why."""


def probe_in_child(spec, timeout=None, relay=None):
    """Run ``autodist calibrate`` on ``spec`` in a child process; the :class:`Calibration` it cached.

    ``timeout``: seconds before it is stopped (None: ``probe_timeout(spec)``). The child reads a copy of
    ``spec`` as it is here (a job may have left nodes out of the file's). ``relay(line)`` gets each of its
    progress lines (``calibrate 3/17: ...``) as it prints it."""
    timeout = probe_timeout(spec) if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="autodist-plan-probe-") as scratch:
        try:
            child = subprocess.Popen(_calibrate_argv(_write_spec(spec, scratch)), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                     errors="replace")
        except OSError as e:
            raise ProbeFailed("could not start it: {}".format(e)) from None
        streams = _Streams(child, relay)
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            err = _stop(child, streams)
            raise ProbeFailed("it ran longer than {:.0f} s; its last line: {}".format(
                timeout, _last_line(err))) from None
        except BaseException:   # Ctrl-C, SIGTERM turned into an exception: the probe's nodes stop too
            _stop(child, streams)
            raise
        out, err = streams.text()
    if child.returncode != 0:
        raise ProbeFailed("exit status {}: {}".format(child.returncode, _last_line(err)))
    try:
        return Calibration.from_dict(json.loads(out)["calibration"])
    except (ValueError, KeyError, TypeError) as e:
        raise ProbeFailed("unreadable output ({}): {}".format(e, _last_line(out))) from None


def _calibrate_argv(spec_path):
    return [sys.executable, "-m", "autodist", "calibrate", "-r", spec_path, "--format", "json",
            "--stop-with-parent", str(os.getpid())]


def stop_with_parent(parent_pid):
    """Stop this process, as SIGTERM stops a probe, when its parent ends; False if it already has.

    Linux only (elsewhere nothing is armed and True is returned): the kernel
    sends ``_PARENT_GONE`` (SIGUSR2, which nothing else sends a probe; not
    SIGHUP, which a terminal's hangup sends a chief kept alive by ``nohup``)
    when the parent's *thread* that started this process ends
    (``prctl(PR_SET_PDEATHSIG)``; ``probe_in_child``'s thread waits for the
    child, so that is the parent's end). The handler also checks that the
    parent changed (the kernel re-parents first), and checking the parent's
    pid after arming closes the race with a parent that died before."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):   # not Linux: the probe runs to its own end (bounded)
        return True
    signal.signal(_PARENT_GONE, functools.partial(_parent_gone, parent_pid))
    if prctl(_PR_SET_PDEATHSIG, int(_PARENT_GONE), 0, 0, 0) != 0:
        return True
    return os.getppid() == parent_pid


def _parent_gone(parent_pid, signum, frame):
    """The parent, the only reader of this process's output, is gone: stop as SIGTERM does, writing nowhere.

    (A line to the dead pipe would raise BrokenPipeError inside the SIGTERM
    handler, before it stopped the probe's nodes.)"""
    if os.getppid() == parent_pid:   # sent by someone else: the parent is alive
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in (1, 2):
                os.dup2(devnull, fd)
        finally:
            os.close(devnull)
    finally:   # stopped even if the output could not be redirected
        signal.raise_signal(signal.SIGTERM)


class _Streams:
    """A child's stdout and stderr, read by two threads as it writes them (neither pipe fills up); each
    progress line on stderr also goes to ``relay`` (without its ``[autodist] `` prefix)."""

    def __init__(self, child, relay):
        self.out, self.err = [], []
        self._readers = [threading.Thread(target=self._read, args=(child.stdout, self.out, None), daemon=True),
                         threading.Thread(target=self._read, args=(child.stderr, self.err, relay), daemon=True)]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines, relay):
        for line in stream:
            lines.append(line)
            if relay is not None and line.startswith(_PROGRESS):
                relay(line.rstrip("\n").split(" ", 1)[1])

    def text(self):
        """``(stdout, stderr)`` so far: all of it once the child has ended (each reader gets _READ_GRACE s to
        reach the end of its pipe)."""
        for reader in self._readers:
            reader.join(_READ_GRACE)
        return "".join(self.out), "".join(self.err)


#: The start of the probe's progress lines (``cli.calibrate.ProbeProgress`` off a terminal).
_PROGRESS = "[autodist] calibrate "
#: Seconds a reader of an ended child's pipe gets to reach its end.
_READ_GRACE = 10.0


def _stop(child, streams):
    """SIGTERM first (the probe's coordinator stops every process it started), then SIGKILL; its stderr."""
    child.terminate()
    try:
        child.wait(timeout=_STOP_GRACE)
    except subprocess.TimeoutExpired:
        child.kill()
        try:
            child.wait(timeout=_STOP_GRACE)
        except subprocess.TimeoutExpired:   # not even SIGKILL ended it (a D-state process): leave it
            return "".join(streams.err)
    return streams.text()[1]


def _write_spec(spec, directory):
    import yaml
    path = os.path.join(directory, "spec.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(spec.to_dict(), handle)
    return path


def _last_line(text):
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _to_stderr(text):
    from autodist.runtime.notices import notice
    notice(sys.stderr, text)
