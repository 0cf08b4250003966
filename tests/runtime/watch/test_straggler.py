"""The straggler report: interface counters, a link's peak rate, shares of the step, the chief's line."""
from autodist.runtime.watch.step_report import StepMonitor
from autodist.runtime.watch.straggler import (LinkMeter, StragglerWatch, describe_straggler, interface_counters,
                                        link_shares)

PROC_NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  999999     10    0    0    0     0          0         0   999999     10    0    0    0     0       0          0
  eth0: 1000     5    0    0    0     0          0         0     2000       7    0    0    0     0       0          0
  eth1:  300     1    0    0    0     0          0         0       40       1    0    0    0     0       0          0
"""


def test_counters_sum_every_interface_but_loopback(tmp_path):
    path = tmp_path / "dev"
    path.write_text(PROC_NET_DEV)
    assert interface_counters(str(path)) == (1300, 2040)
    assert interface_counters(str(tmp_path / "missing")) is None


def test_the_peak_is_the_fastest_rate_over_the_peak_window():
    readings = iter([(0, 0), (100, 10), (200, 20), (300, 30), (1300, 30), (1400, 40)])
    meter = LinkMeter(read=lambda: next(readings), sample_s=0.1, peak_s=0.2)   # a rate over 3 readings
    for t in range(6):
        meter.sample(now=t * 0.1)
    rx, tx, rx_peak, tx_peak = meter.counters()
    assert (rx, tx) == (1400, 40)
    assert rx_peak == 5500   # (1400 - 300) / 0.2, not the burst of one sample (1000 / 0.1)
    assert tx_peak == 100


def test_the_monitors_report_carries_the_counters():
    monitor = StepMonitor()
    assert "net" not in monitor.snapshot()
    meter = LinkMeter(read=lambda: (5, 6))
    meter.sample(now=0.0)
    monitor.meter = meter
    assert monitor.snapshot()["net"] == [5, 6, 0, 0]


def _nets(slow_bytes, fast_bytes, steps):
    """Three nodes after ``steps`` steps: C moved ``slow_bytes`` a step at 1 MB/s, A and B ``fast_bytes`` at 10."""
    return {"A": [fast_bytes * steps, fast_bytes * steps, 10e6, 10e6],
            "B": [fast_bytes * steps, fast_bytes * steps, 10e6, 10e6],
            "C": [slow_bytes * steps, slow_bytes * steps, 1e6, 1e6]}


def test_a_slow_link_is_named_with_its_share_of_the_step():
    shares, step_s = link_shares((0.0, 0, _nets(1e6, 2e6, 0)), (10.0, 9, _nets(1e6, 2e6, 9)))
    assert abs(step_s - 10 / 9) < 1e-9
    assert abs(shares["C"][1] - 1.0) < 1e-9 and abs(shares["A"][1] - 0.2) < 1e-9
    node, line = describe_straggler(shares, step_s, chief="A")
    assert node == "C"
    assert line.startswith("straggler: C: its link is busy 1.00 s of each 1.11 s step (90 %)")
    assert "the other nodes' links: A (the chief) 18 %, B 18 %" in line


def test_no_straggler_when_the_links_are_alike_or_idle():
    alike = link_shares((0.0, 0, _nets(1e5, 1e6, 0)), (10.0, 10, _nets(1e5, 1e6, 10)))
    assert describe_straggler(*alike, chief="A") is None   # every link busy 10 %
    assert link_shares((0.0, 5, _nets(1, 1, 0)), (10.0, 5, _nets(1, 1, 0))) == (None, None)   # no step


def test_the_watch_names_the_straggler_once_its_window_is_full():
    clock = {"t": 0.0, "steps": 0}

    def sample():
        nets = _nets(1e6, 2e6, clock["steps"])
        return {node: (clock["t"], {"trained": clock["steps"], "net": net}) for node, net in nets.items()}

    watch = StragglerWatch(sample, "A", say=None, window_s=4.0)
    lines = []
    for second in range(12):
        clock.update(t=float(second), steps=second)
        lines.append(watch.check(now=float(second)))
    named = [(i, line) for i, line in enumerate(lines) if line]
    assert len(named) == 1 and named[0][0] == 3   # after 3 of the 4 s window, then not again for a minute
    assert named[0][1].startswith("straggler: C: its link is busy 1.00 s of each 1.00 s step (100 %)")
