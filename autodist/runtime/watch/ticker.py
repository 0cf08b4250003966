"""The watch's one loop: a daemon thread calling a function every few seconds until stopped.

    Ticker(name, interval, tick).start()     tick() every interval s; tick() returning False ends the loop
    .stop()                                  no more ticks (the thread ends at its next wake-up)
"""
import threading

__all__ = ["Ticker"]


class Ticker:
    """Calls ``tick()`` every ``interval`` s on a daemon thread named ``name`` until ``stop()`` or a False return."""

    def __init__(self, name, interval, tick):
        self._interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()

    def _run(self):
        while not self._stop.wait(self._interval):
            if self._tick() is False:
                return
