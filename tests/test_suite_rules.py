"""Rules the suite keeps about itself (CONTRIBUTING.md, "Tests"), checked on the test sources with ``ast``.

- No test asserts a wall-clock time: an ``assert`` may not bound from above a value read from a clock
  (``time.monotonic()``, ``time.time()``, ``time.perf_counter()``...), a name given one in the same
  function, or what is computed from them (``now - start < 45``, ``saved - noticed < 60``,
  ``resumed > restored``): on a loaded machine anything takes longer. A lower bound says the code
  waited (``elapsed >= grace``: time does not run fast) and stays. Bounds on waits are fine
  (``proc.wait(60)``); claims about speed belong to ``benchmarks/``. A time may be printed for the record.

- Keras sessions are cleared with ``keras.backend.clear_session(free_memory=False)``: without the argument
  Keras runs ``gc.collect()``, half a second in a process that holds TensorFlow graphs (5 of the 23 s of
  seven option-table cells), and the suite clears a session per cell, in its workers and its pool nodes.

The scanners are checked first on planted faults, so that the rules' tests can fail.
"""
import ast
import os
import re
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))
CLOCKS = {"time", "monotonic", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns", "process_time"}


def _sources():
    for directory, _, files in os.walk(TESTS):
        for name in sorted(files):
            if name.endswith(".py") and name != os.path.basename(__file__):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, os.path.dirname(TESTS)), f.read()


def _is_clock(node):
    """``time.monotonic()`` and the like, ``monotonic()`` imported by name included."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in CLOCKS - {"time"}


def _reads_clock(node, clocked):
    """Whether ``node``'s value is a clock reading or made from one (``now - start``, ``elapsed * 2``); what a call
    makes of one (``Handle(time.monotonic() - 12)``, ``wait(deadline=...)``) is not."""
    if _is_clock(node) or (isinstance(node, ast.Name) and node.id in clocked):
        return True
    if isinstance(node, ast.Call):
        return False
    return any(_reads_clock(child, clocked) for child in ast.iter_child_nodes(node))


def _upper_bounds(compare):
    """The operands of ``compare`` that it bounds from above (``a < b``: ``a``; ``a > b``: ``b``; ``==``: both)."""
    operands = [compare.left] + list(compare.comparators)
    for op, (left, right) in zip(compare.ops, zip(operands, operands[1:])):
        if isinstance(op, (ast.Lt, ast.LtE)):
            yield left
        elif isinstance(op, (ast.Gt, ast.GtE)):
            yield right
        elif isinstance(op, (ast.Eq, ast.NotEq)):
            yield left
            yield right


def wall_clock_asserts(source, filename="<test>"):
    """``"filename:line"`` of every assert that bounds a clock reading from above (module docstring)."""
    found = []
    for function in ast.walk(ast.parse(source, filename)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        clocked = set()
        for _ in range(2):   # names given a clock's reading anywhere in the function (and names made from those)
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and _reads_clock(node.value, clocked):
                    clocked |= {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if isinstance(node, ast.Assert) and any(
                    isinstance(c, ast.Compare) and any(_reads_clock(o, clocked) for o in _upper_bounds(c))
                    for c in ast.walk(node.test)):
                found.append("{}:{}".format(filename, node.lineno))
    return sorted(set(found), key=lambda s: int(s.rpartition(":")[2]))


def test_the_scanner_finds_asserts_on_clock_readings():
    planted = textwrap.dedent("""
        import time
        from time import monotonic

        def test_bound(chief):
            killed_at = time.monotonic()
            chief.kill()
            assert time.monotonic() - killed_at < 45             # line 8: a bound on elapsed time

        def test_difference(chief):
            noticed = time.monotonic()
            saved = chief.find("saved")
            assert saved[0] - noticed < 60                       # line 13: a difference with a clocked name

        def test_order(chief):
            restored = time.time()
            assert chief.find("resumed")[0] > restored           # line 17: a comparison with one

        def test_imported_by_name():
            start = monotonic()
            took = monotonic() - start
            assert took < 1.0                                    # line 22: through a name given the difference

        def test_fine(chief):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:                   # a bounded wait: fine
                break
            assert chief.wait(60) == 0                           # fine
            print("took {:.1f} s".format(time.monotonic() - deadline))
            started = time.monotonic()
            assert time.monotonic() - started >= 1.0             # a lower bound: it waited; fine
            silent = Handle((time.monotonic() - 12.0, {}))       # what a call makes of a reading: not one
            assert report(silent, deadline=time.monotonic() + 5) == "late"
    """)
    assert wall_clock_asserts(planted) == ["<test>:8", "<test>:13", "<test>:17", "<test>:22"]


def test_no_test_asserts_a_wall_clock_time():
    found = [where for path, text in _sources() for where in wall_clock_asserts(text, path)]
    assert found == []


COLLECTING_CLEAR = re.compile(r"clear_session\((?![^)]*free_memory=False)[^)]*\)")


def test_the_scanner_finds_a_clear_session_that_collects_garbage():
    planted = ["keras.backend.clear_session()", "keras.utils.clear_session(free_memory=True)",
               "clear_session( )", "keras.backend.clear_session(free_memory=False)"]
    assert [bool(COLLECTING_CLEAR.search(line)) for line in planted] == [True, True, True, False]


def test_keras_sessions_are_cleared_without_a_garbage_collection():
    found = ["{}:{}".format(path, text.count("\n", 0, match.start()) + 1)
             for path, text in _sources() for match in COLLECTING_CLEAR.finditer(text)]
    assert found == []
