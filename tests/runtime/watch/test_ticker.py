"""The watch's loop: ticks until stopped, or until a tick says it is done."""
import gc
import threading

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


def test_a_ticker_ends_once_its_owner_is_gone():
    class Job:
        pass

    job, ticks = Job(), []
    ticker = Ticker("test-ticker", 0.01, lambda: ticks.append(1), owner=job).start()
    del job
    gc.collect()
    ticker._thread.join(10)
    assert not ticker._thread.is_alive()
