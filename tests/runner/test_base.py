"""OutputPump: long lines cost time linear in their length and are cut on the console, whole in the log."""
import io
import time

from autodist.runner.base import DISCARD, MAX_LINE, OutputPump

CHUNK = 65536   # what the runners read at a time


def _relay(data, log):
    """Seconds to feed ``data`` to a pump in the runners' chunks (the best of three runs)."""
    best = None
    for _ in range(3):
        pump = OutputPump("127.0.0.2", sink=DISCARD, log_path=str(log))
        started = time.perf_counter()
        for start in range(0, len(data), CHUNK):
            pump.feed(data[start:start + CHUNK])
        pump.close()
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
        log.unlink()
    return best


def test_one_long_line_costs_about_what_as_many_bytes_in_short_lines_cost(tmp_path):
    """Before: the line's unfinished part was copied again for every chunk (a 60 MB line took 39 s).

    No wall-clock bound: the same bytes cut into chunk-sized lines are this run's baseline, and a quadratic
    relay of 16 MiB is about a hundred times slower than it.
    """
    size = 16 * 1024 * 1024
    baseline = _relay((b"y" * (CHUNK - 1) + b"\n") * (size // CHUNK), tmp_path / "short.log")
    long_line = _relay(b"x" * size + b"\n", tmp_path / "long.log")
    assert long_line < 10 * baseline + 0.1, (long_line, baseline)


def test_a_long_line_is_whole_in_the_log_and_cut_with_a_marker_on_the_console_and_in_the_tail(tmp_path):
    out, log = io.StringIO(), tmp_path / "node.log"
    pump = OutputPump("127.0.0.2", sink=out, log_path=str(log))
    line = "".join(chr(ord("a") + i % 26) for i in range(3 * MAX_LINE + 5))
    data = ("before\n" + line + "\nafter\n").encode()
    for start in range(0, len(data), 1000):
        pump.feed(data[start:start + 1000])
    pump.close()
    assert log.read_text() == "before\n" + line + "\nafter\n"
    shown = out.getvalue().splitlines()
    marker = (" [autodist: line cut here: the first {} of its {} characters; the whole line is in the node's "
              "log]".format(MAX_LINE, len(line)))
    assert shown == ["[127.0.0.2] before", "[127.0.0.2] " + line[:MAX_LINE] + marker, "[127.0.0.2] after"]
    assert pump.tail(3).splitlines() == ["before", line[:MAX_LINE] + marker, "after"]


def test_a_line_of_exactly_the_limit_is_not_cut(tmp_path):
    out = io.StringIO()
    pump = OutputPump("n", sink=out)
    pump.feed(b"z" * MAX_LINE + b"\n")
    pump.close()
    assert out.getvalue() == "[n] " + "z" * MAX_LINE + "\n"
