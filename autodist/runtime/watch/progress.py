"""The chief's progress line: step, steps/s, examples/s summed over the nodes, ETA.

    progress = Progress(sample, "10.0.0.1", total_steps=400).start()    # on the chief, once the job runs
    ...training...
    progress.stop()

``sample()`` returns ``{node: (received, report)}``, each report a
``step_report`` snapshot (``{"steps", "examples", ...}``) and ``received``
when it was taken (monotonic): the chief's own ``StepMonitor`` and the latest
report of every launched node that has sent one. On a terminal the line is live (rich) and the
lines the nodes print scroll above it::

    ━━━━━━━━━━━━━━━╺━━━━━━━━━━━━━━  step 212/400  41.7 steps/s  2,669 examples/s  ETA 0:00:05

elsewhere (a pipe, a file, CI) it is a plain line every ``every`` seconds::

    [autodist] progress: step 212/400, 41.7 steps/s, 2669 examples/s, ETA 5 s

``step`` is the chief's count of training steps (session calls that ran a
training op; ``step_report``), ``steps/s`` the chief's rate
(the nodes step together), ``examples/s`` the rows fed per second on every
node, summed (shown once a node has fed any), all over the last ``WINDOW``
seconds. The ETA needs ``total_steps``. When the progress stops, a last line
gives the rates since the first step.
"""
import collections
import sys
import threading
import time

from autodist.runner.base import write_line

__all__ = ["Progress", "Rates", "describe", "WINDOW"]

WINDOW = 5.0


class Rates:
    """Per-node samples over the last ``window`` seconds; ``update`` -> (step, steps/s, examples/s or None).

    ``step`` and steps/s are ``chief``'s; examples/s is summed over the nodes.
    ``overall``: the rates since each node's first step instead (the summary
    shown when the progress stops), or, when every step came before the second
    sample with a step (a job faster than the sampling), since the last sample before any step (the chief's, for a node
    whose first report came after its steps).
    """

    def __init__(self, chief, window=WINDOW):
        self._chief = chief
        self._window = window
        self._history = collections.defaultdict(collections.deque)   # node -> (t, steps, examples)
        self._first = {}   # node -> its first point with a step done
        self._idle = {}    # node -> its last point before any step

    def update(self, samples, overall=False):
        step, steps_rate, examples_rate, fed = 0, 0.0, 0.0, False
        for node, (received, report) in samples.items():
            steps = report.get("trained", report.get("steps"))   # training steps; reads of the weights are not
            point = (received, int(steps or 0), int(report.get("examples") or 0))
            history = self._history[node]
            if not history or point[0] > history[-1][0]:
                history.append(point)
            while len(history) > 2 and history[-1][0] - history[1][0] >= self._window:
                history.popleft()
            if point[1] > 0:
                self._first.setdefault(node, point)
            else:
                self._idle[node] = point
            first, last = self._overall_start(node, history) if overall else history[0], history[-1]
            elapsed = last[0] - first[0]
            fed = fed or last[2] > 0
            if elapsed > 0:
                examples_rate += (last[2] - first[2]) / elapsed
            if node == self._chief:
                step = last[1]
                steps_rate = (last[1] - first[1]) / elapsed if elapsed > 0 else 0.0
        return step, steps_rate, (examples_rate if fed else None)

    def _overall_start(self, node, history):
        first = self._first.get(node, history[0])
        if first[0] < history[-1][0] and history[-1][1] > first[1]:
            return first
        # a node first heard of with its steps done started with the chief's session (0 steps, 0 rows)
        return self._idle.get(node, self._idle.get(self._chief, first))


def describe(step, steps_rate, examples_rate, total=None, plain=False):
    """The progress text: ``step 212/400, 41.7 steps/s, 2669 examples/s, ETA 5 s``."""
    parts = ["step {}{}".format(step, "/{}".format(total) if total else ""), "{:.1f} steps/s".format(steps_rate)]
    if examples_rate is not None:
        parts.append("{:.0f} examples/s".format(examples_rate) if plain else "{:,.0f} examples/s".format(examples_rate))
    if total and steps_rate > 0 and step < total:
        seconds = int(round((total - step) / steps_rate))
        parts.append("ETA {} s".format(seconds) if plain else "ETA {}:{:02d}:{:02d}".format(
            seconds // 3600, seconds // 60 % 60, seconds % 60))
    return (", " if plain else "  ").join(parts)


class _LineProxy:
    """``sys.stdout`` (and a terminal's ``sys.stderr``) while the live line shows: each thread's complete
    lines are printed above it, so a traceback is not drawn over."""

    def __init__(self, console, stream):
        self._console = console
        self._stream = stream
        self._partial = threading.local()

    def write(self, text):
        buffered = getattr(self._partial, "text", "") + text
        *lines, self._partial.text = buffered.split("\n")
        self._print(lines)
        return len(text)

    def flush(self):
        """A line this thread has begun is shown now, as a line of its own."""
        partial, self._partial.text = getattr(self._partial, "text", ""), ""
        self._print([partial] if partial else [])

    def _print(self, lines):
        from rich.text import Text
        for line in lines:
            self._console.print(Text.from_ansi(line), soft_wrap=True)

    def __getattr__(self, name):   # fileno, isatty, encoding, ...: the real stream's
        return getattr(self._stream, name)


class Progress:
    """Shows the job's progress on the chief until ``stop`` (see the module docstring)."""

    def __init__(self, sample, chief, total_steps=None, stream=None, interval=1.0, every=10.0):
        self._sample = sample
        self._total = total_steps
        self._stream = stream if stream is not None else sys.stdout
        self._interval = interval
        self._every = every
        self._rates = Rates(chief)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autodist-progress", daemon=True)
        self._live = None
        self._saved = {}   # "stdout"/"stderr": the sys stream the live line replaced

    def start(self):
        self._rates.update(self._safe_sample())   # the point before the first step (the session just opened)
        if _is_terminal(self._stream):
            self._start_live()
        self._thread.start()
        return self

    def _start_live(self):
        from rich.console import Console
        from rich.live import Live
        console = Console(file=self._stream)
        self._live = Live(console=console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False,
                          transient=False)
        self._live.start()
        if sys.stdout is self._stream:
            self._saved["stdout"] = sys.stdout
            if _is_terminal(sys.stderr):   # the same screen: its lines must not land inside the live line
                self._saved["stderr"] = sys.stderr
        for name, stream in self._saved.items():
            setattr(sys, name, _LineProxy(console, stream))

    def stop(self):
        """Show the last line and give the console back; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        figures = self._rates.update(self._safe_sample(), overall=True)
        if self._live is None:
            if figures[0] > 0:
                self._plain(figures)
            return
        self._show(*figures)
        for name, stream in self._saved.items():
            if isinstance(getattr(sys, name), _LineProxy):
                setattr(sys, name, stream)
        self._live.stop()

    def _safe_sample(self):
        try:
            return self._sample()
        except Exception:  # noqa: BLE001 - a progress line never breaks the job it shows
            return {}

    def _run(self):
        last_plain = time.monotonic()
        while not self._stop.wait(self._interval):
            figures = self._rates.update(self._safe_sample())
            if self._live is not None:
                self._show(*figures)
            elif time.monotonic() - last_plain >= self._every and figures[0] > 0:
                last_plain = time.monotonic()
                self._plain(figures)

    def _plain(self, figures):
        write_line("autodist", self._stream, "progress: " + describe(*figures, self._total, plain=True))

    def _show(self, step, steps_rate, examples_rate):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        text = describe(step, steps_rate, examples_rate, self._total)
        row, cells = Table.grid(padding=(0, 2)), []
        width = min(30, self._live.console.width - len(text) - 2)   # the bar takes what the text leaves
        if self._total and width >= 5:
            row.add_column()
            cells.append(ProgressBar(total=self._total, completed=min(step, self._total), width=width))
        row.add_column(no_wrap=True, overflow="ellipsis")
        row.add_row(*cells, text)
        self._live.update(row, refresh=True)


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
