"""The chief's SIGINT / SIGTERM handlers: stop the job first, never cut a stop short, raise failures."""
import signal
import threading

import pytest

from autodist.errors import RemoteWorkerError
from autodist.runtime.launch.chief_signals import ChiefSignals


class Job:
    """What the handlers act on: a stop that records its reasons, a phase, the repeats heard."""

    def __init__(self, phase="none"):
        self.phase = phase
        self.stops, self.repeats = [], []

    def signals(self, interrupts=True):
        return ChiefSignals(stop=self.stops.append, phase=lambda: self.phase, on_repeat=self.repeats.append,
                            interrupts=interrupts)


@pytest.fixture
def installed():
    """``make(job, interrupts=True)``: handlers installed for the test, restored after it."""
    made = []
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def make(job, interrupts=True):
        signals = job.signals(interrupts)
        signals.install()
        made.append(signals)
        return signals
    yield make
    for signals in made:
        signals.restore()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def _deliver(signum):
    """Call the installed handler as Python would on ``signum``."""
    return signal.getsignal(signum)(signum, None)


def test_sigterm_stops_the_job_then_exits_with_143(installed):
    job = Job()
    installed(job)
    with pytest.raises(SystemExit) as info:
        _deliver(signal.SIGTERM)
    assert info.value.code == 143 and job.stops == ["terminated (SIGTERM)"]


def test_sigterm_hands_over_to_the_scripts_own_handler_after_the_stop(installed):
    heard = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        job = Job()
        signals = installed(job)
        _deliver(signal.SIGTERM)
        assert job.stops == ["terminated (SIGTERM)"] and heard == [signal.SIGTERM]
        signals.restore()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_stops_the_job_then_unwinds_the_script(installed):
    job = Job()
    installed(job)
    with pytest.raises(KeyboardInterrupt):
        _deliver(signal.SIGINT)
    assert job.stops == ["interrupted (Ctrl-C)"]


@pytest.mark.parametrize("signum, what", [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")],
                         ids=["sigint", "sigterm"])
def test_a_signal_while_the_job_stops_is_acknowledged_only(installed, signum, what):
    job = Job(phase="running")
    installed(job)
    _deliver(signum)   # neither raises nor stops again
    assert job.repeats == [what] and job.stops == []


def test_after_the_stop_a_signal_only_does_what_it_did_before(installed):
    job = Job(phase="done")
    installed(job)
    with pytest.raises(KeyboardInterrupt):
        _deliver(signal.SIGINT)
    with pytest.raises(SystemExit):
        _deliver(signal.SIGTERM)
    assert job.stops == [] and job.repeats == []


def test_an_armed_failure_is_raised_in_the_main_thread(installed):
    job = Job()
    signals = installed(job)
    assert signals.can_interrupt
    error = RemoteWorkerError("10.0.0.2", exit_code=1, reason="failed on purpose")
    signals.arm(error)
    with pytest.raises(RemoteWorkerError) as info:
        signals.fire()
        threading.Event().wait(5)   # the handler raises here, in the main thread
    assert info.value is error and job.stops == []


def test_without_interrupts_sigint_is_left_alone(installed):
    before_int, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals = installed(Job(), interrupts=False)
    assert not signals.can_interrupt and signal.getsignal(signal.SIGINT) is before_int
    assert signal.getsignal(signal.SIGTERM) is not before_term   # SIGTERM still stops the job


def test_restore_leaves_a_handler_the_script_installed_meanwhile():
    signals = Job().signals()
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals.install()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the script replaces ours
    try:
        signals.restore()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is before[0]
    finally:
        signal.signal(signal.SIGTERM, before[1])


def test_off_the_main_thread_nothing_is_installed():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals = Job().signals()
    thread = threading.Thread(target=signals.install)
    thread.start()
    thread.join(5)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert not signals.can_interrupt
