"""The chief's progress line: rates over the nodes, the text, live on a terminal, plain lines elsewhere."""
import io
import sys
import time

import pytest

from autodist.runtime.watch.progress import Progress, Rates, describe


def _report(steps, examples=0):
    return {"steps": steps, "examples": examples, "busy": 0.0, "step_s": 0.0}


def test_rates_are_the_chiefs_steps_and_the_examples_summed_over_nodes():
    rates = Rates("chief", window=10.0)
    assert rates.update({"chief": (0.0, _report(0, 0)), "n2": (0.5, _report(0, 0))}) == (0, 0.0, None)
    step, steps_rate, examples_rate = rates.update({"chief": (2.0, _report(40, 1280)),
                                                     "n2": (2.5, _report(38, 1216))})
    assert step == 40 and steps_rate == pytest.approx(20.0)
    assert examples_rate == pytest.approx(640.0 + 608.0)


def test_rates_forget_samples_older_than_the_window():
    rates = Rates("chief", window=2.0)
    for t in range(6):
        figures = rates.update({"chief": (float(t), _report(10 * t if t <= 3 else 30 + 100 * (t - 3)))})
    assert figures[0] == 230 and figures[1] == pytest.approx(100.0)   # t = 3..5 only; 10 steps/s before


def test_the_overall_rates_count_from_each_nodes_first_step():
    rates = Rates("chief", window=1.0)
    rates.update({"chief": (0.0, _report(0, 0))})              # the session opens; the first step takes long
    rates.update({"chief": (10.0, _report(1, 32))})
    rates.update({"chief": (20.0, _report(101, 3232))})
    assert rates.update({"chief": (30.0, _report(101, 3232))}) == (101, 0.0, 0.0)   # the job has ended
    assert rates.update({"chief": (30.0, _report(101, 3232))}, overall=True) == (101, 5.0, 160.0)


def test_a_job_done_within_one_sample_is_rated_from_the_sample_before_its_steps():
    rates = Rates("chief")
    rates.update({"chief": (0.0, _report(0, 0))})
    assert rates.update({"chief": (2.0, _report(4, 128)), "n2": (2.0, _report(4, 128))},
                        overall=True) == (4, 2.0, 128.0)   # n2's first report came after its steps


def test_a_job_done_before_the_second_sample_with_steps_is_rated_from_before_its_steps():
    rates = Rates("chief")
    rates.update({"chief": (0.0, _report(0, 0))})              # the session opens
    rates.update({"chief": (1.0, _report(200, 6400))})         # every step done by the first interval
    assert rates.update({"chief": (1.5, _report(200, 6400))}, overall=True) == (200, 200 / 1.5, 6400 / 1.5)


def test_a_node_without_new_reports_keeps_its_last_rate():
    rates = Rates("chief")
    rates.update({"chief": (0.0, _report(0, 0))})
    rates.update({"chief": (1.0, _report(10, 320))})
    assert rates.update({"chief": (1.0, _report(10, 320))}) == (10, 10.0, 320.0)


@pytest.mark.parametrize("args, plain, text", [
    ((212, 41.7, 2669.4, 400), True, "step 212/400, 41.7 steps/s, 2669 examples/s, ETA 5 s"),
    ((212, 41.7, 2669.4, 400), False, "step 212/400  41.7 steps/s  2,669 examples/s  ETA 0:00:05"),
    ((212, 41.7, None, None), True, "step 212, 41.7 steps/s"),
    ((401, 41.7, None, 400), True, "step 401/400, 41.7 steps/s"),
    ((0, 0.0, None, 400), True, "step 0/400, 0.0 steps/s"),
], ids=["plain", "terminal", "no-total-no-examples", "past-the-total", "not-started"])
def test_describe(args, plain, text):
    assert describe(*args, plain=plain) == text


class _Counter:
    """A job that takes 10 steps of 32 rows a second on the chief and on one other node."""

    def __init__(self):
        self.start = time.monotonic()

    def __call__(self):
        now = time.monotonic()
        steps = int((now - self.start) * 10)
        return {"chief": (now, _report(steps, 32 * steps)), "n2": (now, _report(steps, 32 * steps))}


def test_without_a_terminal_the_progress_is_a_plain_line_every_few_seconds():
    stream = io.StringIO()
    # 100000 steps: at 10 a second, a summary with an ETA however long a loaded machine takes to show 3 lines
    began = time.monotonic()
    progress = Progress(_Counter(), "chief", total_steps=100000, stream=stream, interval=0.05, every=0.3).start()
    deadline = began + 60
    while len(stream.getvalue().splitlines()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    running = stream.getvalue().splitlines()
    progress.stop()
    progress.stop()   # idempotent
    lines = stream.getvalue().splitlines()
    elapsed = time.monotonic() - began   # after the lines were read: every line came within it
    assert len(running) >= 3, "3 progress lines within 60 s, got {}".format(running)
    # a line every 0.3 s at most (not every 0.05 s sample), and the summary
    assert len(running) + 1 <= len(lines) <= elapsed / 0.3 + 2, (elapsed, lines)
    assert all(line.startswith("[autodist] progress: step ") and "/100000, " in line for line in lines), lines
    assert "examples/s" in lines[-1] and "ETA" in lines[-1]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_line_is_live_and_printed_lines_scroll_above_it(monkeypatch):
    terminal, errors = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", errors)
    progress = Progress(_Counter(), "chief", total_steps=100, stream=terminal, interval=0.05).start()
    assert sys.stdout is not terminal and sys.stderr is not errors
    print("[node 0] step 1 loss 0.5")
    print("Traceback (most recent call last):", file=sys.stderr)
    sys.stdout.write("a prompt> ")
    sys.stdout.flush()
    time.sleep(0.3)
    progress.stop()
    assert sys.stdout is terminal and sys.stderr is errors
    output = terminal.getvalue()
    assert "[node 0] step 1 loss 0.5" in output and "Traceback (most recent call last):" in output
    assert "a prompt> " in output
    assert "steps/s" in output and "examples/s" in output and "/100" in output


def test_a_job_done_before_the_first_interval_still_gets_its_rates():
    start = time.monotonic()
    steps = iter([0, 40, 40])
    stream = io.StringIO()
    progress = Progress(lambda: {"chief": (time.monotonic(), _report(next(steps), 0))}, "chief", total_steps=40,
                        stream=stream, interval=60.0).start()
    time.sleep(0.1)
    progress.stop()
    line, = stream.getvalue().splitlines()
    rate = float(line.split(", ")[1].split()[0])
    # the rate is of the steps' own span, not of the whole run: 40 steps at it take no longer than the run took
    # (the rate is printed to 0.1 step/s: the true one is at most 0.05 above it)
    assert line.startswith("[autodist] progress: step 40/40, ") and time.monotonic() - start >= 40 / (rate + 0.05), line


def test_a_failing_sample_never_breaks_the_job():
    def broken():
        raise RuntimeError("no reports")
    stream = io.StringIO()
    progress = Progress(broken, "chief", stream=stream, interval=0.02, every=0.0).start()
    time.sleep(0.2)
    progress.stop()
    assert stream.getvalue() == ""


def test_the_step_is_the_count_of_training_steps_when_a_report_has_it():
    rates = Rates("chief")
    rates.update({"chief": (0.0, dict(_report(0), trained=0))})
    assert rates.update({"chief": (1.0, dict(_report(201), trained=200))})[0] == 200   # a final read: a call
    assert Rates("chief").update({"chief": (1.0, _report(7))})[0] == 7   # an older node's report: its calls
