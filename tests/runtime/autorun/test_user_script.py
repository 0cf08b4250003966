"""A user's script run as ``__main__`` (autodist run), or until it asks for a session (autodist plan)."""
import json
import os
import sys
import textwrap

import pytest

from autodist.runtime.autorun.user_script import (SessionRequested, intercept_session_requests, run_as_main,
                                          run_until_session_request, session_requests_intercepted)

VARIABLE = "AUTODIST_TEST_USER_SCRIPT"


def _script(tmp_path, body, name="script.py"):
    folder = tmp_path / "scripts"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_the_script_sees_python_scripts_view_and_everything_is_put_back(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    seen = tmp_path / "seen.json"
    script = _script(tmp_path, "VARIABLE = {!r}\n".format(VARIABLE) + textwrap.dedent("""
        import json, os, sys
        record = {"name": __name__, "argv": sys.argv, "path0": sys.path[0], "variable": os.environ.get(VARIABLE)}
        json.dump(record, open(sys.argv[1], "w"))
        raise ValueError("after recording")
    """))
    argv, path = list(sys.argv), list(sys.path)
    with pytest.raises(ValueError, match="after recording"):
        run_as_main(script, [str(seen), "--x", "a b"], {VARIABLE: "7"})
    assert json.loads(seen.read_text()) == {"name": "__main__", "argv": [script, str(seen), "--x", "a b"],
                                            "path0": os.path.dirname(script), "variable": "7"}
    assert sys.argv == argv and sys.path == path and VARIABLE not in os.environ


def test_a_variable_set_before_gets_its_value_back(tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, "before")
    script = _script(tmp_path, "import os\nassert os.environ['{}'] == 'during'\n".format(VARIABLE))
    run_as_main(script, [], {VARIABLE: "during"})
    assert os.environ[VARIABLE] == "before"


def test_the_scripts_exit_reaches_the_caller(tmp_path):
    script = _script(tmp_path, "import sys\nsys.exit(3)\n")
    with pytest.raises(SystemExit) as info:
        run_as_main(script, [])
    assert info.value.code == 3


def test_a_missing_script_is_a_missing_file(tmp_path):
    missing = str(tmp_path / "nope.py")
    with pytest.raises(FileNotFoundError) as info:
        run_as_main(missing, [])
    assert info.value.filename == missing


_ASKS = """
    from autodist.runtime.autorun.user_script import SessionRequested, session_requests_intercepted
    if session_requests_intercepted():
        raise SessionRequested("the AutoDist object")
    raise AssertionError("not intercepted")
"""


def test_a_session_request_stops_the_script_and_hands_over_the_asker(tmp_path):
    script = _script(tmp_path, _ASKS)
    assert run_until_session_request(script, []) == "the AutoDist object"
    assert not session_requests_intercepted()


def test_a_script_that_never_asks_gives_none_and_its_exit_propagates(tmp_path):
    assert run_until_session_request(_script(tmp_path, "x = 1\n"), []) is None
    with pytest.raises(SystemExit):
        run_until_session_request(_script(tmp_path, "raise SystemExit(4)\n", name="exits.py"), [])


def test_session_requested_passes_through_except_exception():
    with intercept_session_requests():
        assert session_requests_intercepted()
        with pytest.raises(SessionRequested) as info:
            try:
                raise SessionRequested("ad")
            except Exception:   # what a script's broad handler would do: it must not swallow the request
                pytest.fail("SessionRequested was caught as an Exception")
    assert info.value.autodist == "ad" and not session_requests_intercepted()
