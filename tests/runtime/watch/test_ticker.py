"""The watch's loop: ticks until stopped, or until a tick says it is done."""
import gc
import threading

import pytest

from autodist.runtime.watch.ticker import Ticker


def test_ticks_until_a_tick_returns_false():
    calls, done = [], threading.Event()

    def tick():
        calls.append(1)
        if len(calls) == 3:
            done.set()
            return False

    ticker = Ticker("test-ticker", 0.01, tick).start()
    assert done.wait(10)
    ticker._thread.join(10)
    assert not ticker._thread.is_alive() and len(calls) == 3


def test_stop_ends_the_ticks():
    calls = []
    ticker = Ticker("test-ticker", 0.01, lambda: calls.append(1)).start()
    ticker.stop()
    ticker._thread.join(10)
    assert not ticker._thread.is_alive() and len(calls) <= 1



def test_a_jobs_link_meter_ends_with_the_job_that_dropped_it():
    """A long-lived process (a notebook, a pool of nodes) gains no polling thread per job."""
    from autodist.runtime.watch.step_report import StepMonitor
    from autodist.runtime.watch.straggler import interface_counters, start_link_views
    if interface_counters() is None:
        pytest.skip("no interface counters here (/proc/net/dev without an interface but lo)")
    monitor = StepMonitor()
    start_link_views(monitor)
    thread = monitor.meter._ticker._thread
    assert thread.is_alive()
    del monitor
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()
