"""Running a user's script in this process, as ``python script.py args`` would run it.

    run_as_main(script, args, variables)       autodist run: the whole script, sessions distributed
    run_until_session_request(script, args)    autodist plan: until it asks for a session;
                                               the AutoDist object that asked, or None

The script runs as ``__main__`` with ``sys.argv = [script] + args``, its
directory first on ``sys.path`` and ``variables`` in ``os.environ``; all three
are put back afterwards, also when it raises. Its ``SystemExit`` reaches the
caller, which decides what the status means.

Stopping a script at its session request: inside ``intercept_session_requests()``
``AutoDist.create_distributed_session`` raises ``SessionRequested`` carrying
the AutoDist object, whose ``graph_item`` is the graph captured so far. That
is a ``BaseException``, so that a script's ``except Exception`` does not
swallow it.
"""
import contextlib
import contextvars
import os
import runpy
import sys

__all__ = ["run_as_main", "run_until_session_request", "SessionRequested", "intercept_session_requests",
           "session_requests_intercepted"]

_intercept = contextvars.ContextVar("autodist_intercept_session_requests", default=False)


class SessionRequested(BaseException):
    """Raised by ``create_distributed_session`` inside ``intercept_session_requests()``.

    Tools that run a user's script only to look at its graph (``autodist plan``)
    stop it at the moment it asks for a session; ``autodist`` carries the
    AutoDist object, whose ``graph_item`` is the captured graph. A
    BaseException, so that a script's ``except Exception`` does not swallow it.
    """

    def __init__(self, autodist):
        super().__init__("the script asked for a distributed session")
        self.autodist = autodist


@contextlib.contextmanager
def intercept_session_requests():
    """Within the block, ``create_distributed_session`` raises ``SessionRequested``."""
    token = _intercept.set(True)
    try:
        yield
    finally:
        _intercept.reset(token)


def session_requests_intercepted():
    """True inside ``intercept_session_requests()``."""
    return _intercept.get()


@contextlib.contextmanager
def _as_main(script, args, variables):
    """``sys.argv``, ``sys.path[0]`` and ``variables`` in ``os.environ`` as for ``python script args``."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_env = {k: os.environ.get(k) for k in variables}
    sys.argv = [script] + list(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    os.environ.update(variables)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_as_main(script, args, variables=None):
    """Run ``script`` with ``args`` as ``__main__`` (see the module docstring); its SystemExit propagates.

    Raises ``FileNotFoundError`` (reported by the command line as a missing
    file) when ``script`` is not a file.
    """
    if not os.path.isfile(script):
        raise FileNotFoundError(2, "No such file", script)
    with _as_main(script, args, variables or {}):
        runpy.run_path(script, run_name="__main__")


def run_until_session_request(script, args):
    """Run ``script`` until it asks for a distributed session: the AutoDist object that asked.

    None when the script finished without asking; its ``SystemExit``
    propagates.
    """
    try:
        with intercept_session_requests():
            run_as_main(script, args)
    except SessionRequested as request:
        return request.autodist
    return None
