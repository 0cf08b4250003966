"""The chief's signals while its job runs: they stop the job first, and carry failures in.

    SIGINT    Ctrl-C: the job is stopped, then the script's own SIGINT handler
              decides, or ``KeyboardInterrupt`` unwinds the script as usual.
              The same handler raises a failure the coordinator's watch thread
              armed (``arm`` + ``fire``): the main thread gets the
              ``RemoteWorkerError`` wherever it is (evaluating, sleeping, stuck)
    SIGTERM   what schedulers send to cancel (Slurm, Kubernetes, ``timeout``):
              ``before_term`` runs (a bounded last checkpoint), the job is
              stopped, then the previous handler runs, or the process exits
              with 128 + 15 = 143
    again     a signal that arrives while the job is being stopped is
              acknowledged (``on_repeat``), never allowed to cut the stop short
    held      while the job is being launched (``hold`` .. ``release``) a
              signal is only recorded; the launch acts on it at its next step
              (``check``), when every process started so far is known, so the
              stop leaves nothing behind (no process, no job directory)

Python runs signal handlers in the main thread only, so they are installed
only from there; ``restore`` puts the previous ones back, leaving alone any
handler the script installed meanwhile.
"""
import signal
import threading

__all__ = ["ChiefSignals"]


class ChiefSignals:
    """SIGINT and SIGTERM handlers for the lifetime of one job (see the module docstring).

    ``stop(reason)`` stops every process of the job; ``phase()`` is where
    that stop is: ``"none"`` (not begun), ``"running"`` or ``"done"``;
    ``on_repeat(what)`` hears of a signal that arrives while it runs.
    ``interrupts=False`` leaves SIGINT alone: failures then reach the chief
    only through its session.
    """

    def __init__(self, stop, phase, on_repeat, interrupts=True, before_term=None):
        self._stop = stop
        self._before_term = before_term   # runs before SIGTERM stops the job (a last checkpoint)
        self._phase = phase
        self._on_repeat = on_repeat
        self._interrupts = interrupts
        self._sigint = None     # (our handler, the previous one) while installed
        self._sigterm = None
        self._pending = None    # the failure our SIGINT handler is to raise
        self._holding = False   # launching: signals are recorded in _held, acted on by check()
        self._held = None

    @property
    def can_interrupt(self):
        """True while our SIGINT handler is installed, so that ``fire`` raises the armed failure."""
        return self._sigint is not None

    def install(self):
        """Install the handlers (from the main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._install_sigterm()
        if self._interrupts:
            self._install_sigint()

    def hold(self):
        """Install the handlers, recording signals until ``check`` or ``release`` acts on them."""
        self._holding = True
        self.install()

    def check(self):
        """Act on a signal recorded while held, as if it arrived now (stop the job, then exit or raise)."""
        held, self._held = self._held, None
        if held is None:
            return
        self._holding = False
        handler = self._sigterm if held == signal.SIGTERM else self._sigint
        if handler is not None:
            handler[0](held, None)

    def release(self):
        """The launch is over: from now on signals act at once; one recorded meanwhile acts now."""
        self.check()
        self._holding = False

    def _held_now(self, signum):
        if self._holding:
            self._held = self._held or signum
        return self._holding

    def arm(self, error):
        """Make our next SIGINT raise ``error`` in the main thread."""
        self._pending = error

    @staticmethod
    def fire():
        """Send SIGINT to the main thread, wherever it is."""
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _install_sigint(self):
        previous = signal.getsignal(signal.SIGINT)

        def on_sigint(signum, frame):
            if self._held_now(signum):
                return None
            if self._phase() == "running":
                return self._on_repeat("Ctrl-C")
            pending, self._pending = self._pending, None
            if pending is not None:
                raise pending
            if callable(previous) and previous is not signal.default_int_handler:
                return previous(signum, frame)   # the script's own handler decides
            if previous == signal.SIG_IGN:
                return None
            if self._phase() == "none":   # stop the job before the interrupt unwinds the script
                self._stop("interrupted (Ctrl-C)")
            return signal.default_int_handler(signum, frame)
        signal.signal(signal.SIGINT, on_sigint)
        self._sigint = (on_sigint, previous)

    def _install_sigterm(self):
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            if self._held_now(signum):
                return None
            if self._phase() == "running":
                return self._on_repeat("SIGTERM")
            if self._phase() == "none":
                if self._before_term is not None:
                    self._before_term()
                self._stop("terminated (SIGTERM)")
            if callable(previous):
                return previous(signum, frame)
            raise SystemExit(128 + signum)
        signal.signal(signal.SIGTERM, on_sigterm)
        self._sigterm = (on_sigterm, previous)

    def restore(self):
        """Put back the handlers that were there before ``install``, unless the script replaced ours."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name, signum in (("_sigint", signal.SIGINT), ("_sigterm", signal.SIGTERM)):
            installed = getattr(self, name)
            setattr(self, name, None)
            if installed is not None and signal.getsignal(signum) is installed[0]:
                signal.signal(signum, installed[1])
