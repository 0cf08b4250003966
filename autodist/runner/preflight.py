"""Checks every node before anything of a job starts.

For each runner, in parallel: connect (SSH: reachable, host key trusted,
authenticated; srun: ``srun`` on PATH, the host in the allocation), then
run python inside the node's ``python_venv`` to import autodist and
TensorFlow and print their versions, which must equal ours.  All failures
are collected and raised together as ``PreflightError`` so the user fixes
every host in one go; a host that has not answered when the overall
timeout ends is reported with the step it was stuck in.
"""
import json
import threading
import time

from autodist.errors import LaunchError, PreflightError
from autodist.runner.base import run_for_output

__all__ = ["preflight", "local_versions", "check_host"]

VERSIONS_MARKER = "__autodist_versions__"
_SNIPPET = ("import json, sys, autodist, tensorflow; print({!r} + ' ' + json.dumps({{"
            "'autodist': autodist.__version__, 'tensorflow': tensorflow.__version__, "
            "'python': sys.version.split()[0]}}))").format(VERSIONS_MARKER)


def local_versions():
    """The versions every node must match: ``{"autodist": ..., "tensorflow": ...}``.

    Imports TensorFlow (a few seconds the first time), without its start-up chatter on the console: the
    elastic supervisor is the first to import it in its process when a remote host joins.
    """
    import autodist
    from autodist.runner.console import import_quietly
    return {"autodist": autodist.__version__, "tensorflow": import_quietly("tensorflow").__version__}


def _where(runner):
    return " in python_venv {!r}".format(runner.python_venv) if runner.python_venv else ""


def _parse_versions(output):
    for line in reversed(output.splitlines()):
        if line.startswith(VERSIONS_MARKER + " "):
            try:
                return json.loads(line[len(VERSIONS_MARKER) + 1:])
            except ValueError:
                return None
    return None


def _explain_failure(runner, python, code, output):
    lines = [l for l in output.splitlines() if l.strip()]
    last = lines[-1].strip() if lines else "no output"
    if code == 127:
        return "{} not found{} ({})".format(python, _where(runner), last)
    return "importing autodist and tensorflow with {}{} failed (exit code {}): {}".format(
        python, _where(runner), code, last)


def check_host(runner, expected_versions, timeout, python="python3", state=None):
    """Problem found on ``runner``'s node as a sentence, or None if it is fit.

    ``state`` (a dict) is updated with the current step so that a caller
    giving up early can say where the host got stuck.
    """
    state = state if state is not None else {}
    deadline = time.monotonic() + timeout
    state["step"] = "connecting"
    try:
        runner.connect()
    except LaunchError as e:
        return str(e)
    state["step"] = "importing autodist and tensorflow{}".format(_where(runner))
    code, output = run_for_output(runner, [python, "-c", _SNIPPET], deadline - time.monotonic())
    if code is None:
        return "no answer within {:.0f}s while {}".format(timeout, state["step"])
    versions = _parse_versions(output) if code == 0 else None
    if versions is None:
        return _explain_failure(runner, python, code, output)
    wrong = ["{} {} (expected {})".format(name, versions.get(name), want)
             for name, want in sorted(expected_versions.items()) if versions.get(name) != want]
    if wrong:
        return "version mismatch{}: {}".format(_where(runner), ", ".join(wrong))
    return None


def preflight(runners, expected_versions, timeout=30.0, python="python3"):
    """Check all ``runners`` at once; raise ``PreflightError`` naming every bad host.

    Returns only when every host passed.  Bounded by ``timeout`` seconds in
    total; hosts still busy then are reported as not answering.
    """
    runners = list(runners)
    results, states, threads = {}, {}, []

    def work(runner):
        try:
            problem = check_host(runner, expected_versions, timeout, python, states[runner.name])
        except Exception as e:  # any crash is that host's failure, reported with the others
            problem = "preflight crashed: {}: {}".format(type(e).__name__, e)
        results[runner.name] = problem

    for runner in runners:
        states[runner.name] = {"step": "starting"}
        thread = threading.Thread(target=work, args=(runner,), daemon=True,
                                  name="autodist-preflight-{}".format(runner.name))
        thread.start()
        threads.append((runner, thread))
    deadline = time.monotonic() + timeout
    for _, thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.0))
    failures = {}
    for runner, thread in threads:
        if runner.name not in results:
            failures[runner.name] = "no answer within {:.0f}s while {}".format(
                timeout, states[runner.name]["step"])
        elif results[runner.name] is not None:
            failures[runner.name] = results[runner.name]
    if failures:
        raise PreflightError(failures)
