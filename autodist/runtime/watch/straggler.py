"""Which node's link holds a synchronous job back, measured on every node's own network interface.

In a synchronous job every node waits for the slowest; when that is one node's
network link (a slower NIC, a congested port), the others' links sit idle
most of each step. Every node measures its own interface, and the chief
compares them::

    node      LinkMeter: every SAMPLE_S the interface counters (/proc/net/dev, all but lo):
              bytes in and out so far, and the fastest rate each way over PEAK_S seen so far
              -> in the node's report once a second ("net": [rx, tx, rx_peak, tx_peak])
    chief     StragglerWatch, once a second over the last WINDOW_S:
              link time per step = max(bytes in / rx_peak, bytes out / tx_peak) per training step
              share = link time per step / the chief's step time
              the node with the largest share is the straggler when its share is at least
              MIN_SHARE and LEAD times the next node's:

    [autodist] straggler: 10.77.0.3: its link is busy 1.52 s of each 1.63 s step (93 %), 3.9 MB in and
      4.0 MB out a step at up to 2.5 / 2.5 MB/s; the other nodes' links: 10.77.0.1 18 %, 10.77.0.2 10 %

The peak is the node's own best so far: a link that once moved data at its
full rate (to a fast peer, or alone) measures its capacity; the time it
needs for a step's bytes at that rate is the part of the step its link
cannot give back. With two nodes both ends of the one path see the same
slow rate, and the node that moves more bytes (a parameter server's) is
named. Nothing here changes the job: it keeps running, and the line is
repeated only when the straggler changes or every REPEAT_S.
"""
import collections
import time
import weakref

from autodist.runtime.notices import notice
from autodist.runtime.watch.ticker import Ticker

__all__ = ["LinkMeter", "StragglerWatch", "start_link_views", "interface_counters", "link_shares", "describe_straggler",
           "SAMPLE_S", "PEAK_S", "WINDOW_S", "MIN_SHARE", "LEAD", "REPEAT_S"]

SAMPLE_S = 0.05     # s between two reads of the interface counters
PEAK_S = 0.1        # s over which a rate counts as the link's (two samples: a rate limiter's burst weighs little)
WINDOW_S = 8.0      # s of reports the chief compares
MIN_SHARE = 0.5     # a straggler's link is busy at least this part of the step ...
LEAD = 2.0          # ... and this many times longer than any other node's
REPEAT_S = 60.0     # s after which an unchanged straggler is named again


def interface_counters(path="/proc/net/dev"):
    """``(bytes received, bytes sent)`` over this network namespace's interfaces but loopback; None if unreadable."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()[2:]
    except OSError:
        return None
    rx = tx = 0
    for line in lines:
        name, _, fields = line.partition(":")
        values = fields.split()
        if name.strip() == "lo" or len(values) < 9:
            continue
        rx += int(values[0])
        tx += int(values[8])
    return rx, tx


class LinkMeter:
    """A daemon thread reading the interface counters every ``SAMPLE_S``; ``counters()`` for the report."""

    def __init__(self, read=interface_counters, sample_s=SAMPLE_S, peak_s=PEAK_S):
        self._read = read
        self._history = collections.deque(maxlen=max(2, int(round(peak_s / sample_s)) + 1))
        self._peak = [0.0, 0.0]
        self._last = None
        self._ticker = Ticker("autodist-link-meter", sample_s, self.sample)

    def start(self):
        if self._read() is not None:   # no counters here (not Linux): nothing to report
            self._ticker.start()
        return self

    def stop(self):
        self._ticker.stop()

    def sample(self, now=None):
        """Take one reading (the thread does, every ``SAMPLE_S``)."""
        found = self._read()
        if found is None:
            return
        now = time.monotonic() if now is None else now
        self._history.append((now, found))
        self._last = found
        first_t, first = self._history[0]
        if now - first_t > 0 and len(self._history) == self._history.maxlen:
            for i in (0, 1):
                self._peak[i] = max(self._peak[i], (found[i] - first[i]) / (now - first_t))

    def counters(self):
        """``[rx bytes, tx bytes, rx peak B/s, tx peak B/s]``, or None before the first reading."""
        if self._last is None:
            return None
        return [self._last[0], self._last[1], round(self._peak[0]), round(self._peak[1])]


def link_shares(first, last):
    """``({node: (share, link_s, rx per step, tx per step, rx_peak, tx_peak)}, step_s)`` between two samples.

    ``first``/``last``: ``(time, chief's training steps, {node: net counters})``; None when no step ran.
    """
    (t0, steps0, net0), (t1, steps1, net1) = first, last
    steps = steps1 - steps0
    if steps <= 0 or t1 <= t0:
        return None, None
    step_s = (t1 - t0) / steps
    found = {}
    for node, now in net1.items():
        before = net0.get(node)
        if before is None or now is None:
            continue
        rx, tx = ((now[i] - before[i]) / steps for i in (0, 1))
        rx_peak, tx_peak = now[2], now[3]
        link_s = max(rx / rx_peak if rx_peak else 0.0, tx / tx_peak if tx_peak else 0.0)
        found[node] = (min(link_s / step_s, 1.0), link_s, rx, tx, rx_peak, tx_peak)
    return found, step_s


def describe_straggler(shares, step_s, chief):
    """``(node, line)`` of the straggler, or None when no node's link stands out (``MIN_SHARE``, ``LEAD``)."""
    if len(shares) < 2:
        return None
    ranked = sorted(shares, key=lambda node: shares[node][0], reverse=True)
    top, second = ranked[0], ranked[1]
    share, link_s, rx, tx, rx_peak, tx_peak = shares[top]
    if share < MIN_SHARE or share < LEAD * shares[second][0]:
        return None
    others = ", ".join("{}{} {:.0f} %".format(n, " (the chief)" if n == chief else "", 100 * shares[n][0])
                       for n in sorted(ranked[1:]))
    return top, ("straggler: {}{}: its link is busy {:.2f} s of each {:.2f} s step ({:.0f} %), {:.1f} MB in and {:.1f} MB "
            "out a step at up to {:.1f} / {:.1f} MB/s; the other nodes' links: {}".format(
                top, " (the chief)" if top == chief else "", link_s, step_s, 100 * share, rx / 1e6, tx / 1e6,
                rx_peak / 1e6, tx_peak / 1e6, others))


class StragglerWatch:
    """The chief's thread: every second, the nodes' link shares over the last ``WINDOW_S`` (module docstring).

    ``sample()`` is the progress line's (``{node: (received, report)}``, the
    chief's own first); ``say(line)`` prints (default: the chief's notices).
    """

    def __init__(self, sample, chief, say=None, window_s=WINDOW_S, interval=1.0):
        self._sample = sample
        self._chief = chief
        self._say = say or (lambda line: notice(None, line))
        self._window_s = window_s
        self._points = collections.deque()
        self._named = (None, 0.0)   # (node, when)
        self._ticker = Ticker("autodist-straggler-watch", interval, self._tick)

    def start(self):
        self._ticker.start()
        return self

    def stop(self):
        self._ticker.stop()

    def _tick(self):
        line = self.check()
        if line is not None:
            self._say(line)

    def check(self, now=None):
        """Add a sample; the line to print now, or None."""
        now = time.monotonic() if now is None else now
        samples = self._sample()
        chief = samples.get(self._chief)
        if chief is None:
            return None
        steps = int(chief[1].get("trained", chief[1].get("steps")) or 0)
        self._points.append((now, steps, {node: report.get("net") for node, (_, report) in samples.items()}))
        while len(self._points) > 2 and now - self._points[1][0] >= self._window_s:
            self._points.popleft()
        if now - self._points[0][0] < self._window_s * 0.75:
            return None
        shares, step_s = link_shares(self._points[0], self._points[-1])
        found = describe_straggler(shares, step_s, self._chief) if shares else None
        if found is None:
            return None
        node, line = found
        if node == self._named[0] and now - self._named[1] < REPEAT_S:
            return None
        self._named = (node, now)
        return line


def start_link_views(monitor, sample=None, chief=None):
    """Meter this node's link into ``monitor``'s reports; on the chief (``sample``) also watch for a straggler.

    Returns the chief's ``StragglerWatch`` (stop it when the job ends), or None.
    """
    if monitor.meter is None:
        monitor.meter = LinkMeter().start()
        weakref.finalize(monitor, monitor.meter.stop)   # the job stops it at its end; a dropped job too
    return StragglerWatch(sample, chief).start() if sample is not None else None
