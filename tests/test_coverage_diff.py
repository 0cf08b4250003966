"""scripts/coverage_diff.py: what one run covered and another did not, across checkouts whose lines moved."""
import importlib.util
import os

from coverage import CoverageData

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "coverage_diff.py")
BEFORE = '"""m."""\n\n\ndef f(x):\n    if x:\n        return 1\n    return 2\n\n\ndef g():\n    return 3\n'
#: line 7 changed into two, a function added before g: g's lines 10-11 are now 15-16
AFTER = BEFORE.replace("    return 2\n", "    y = 2\n    return y\n").replace(
    "def g", "def h():\n    return 4\n\n\ndef g")
#: f(1), f(0) and g() ran before; f(1) only after
BEFORE_ARCS = [(-1, 1), (1, 4), (4, 10), (10, -1), (-4, 5), (5, 6), (6, -4), (5, 7), (7, -4), (-10, 11), (11, -10)]
AFTER_ARCS = [(-1, 1), (1, 4), (4, 11), (11, 15), (15, -1), (-4, 5), (5, 6), (6, -4)]


def _script():
    spec = importlib.util.spec_from_file_location("coverage_diff", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path, name, text, arcs):
    """``(data file, checkout)``: a checkout holding autodist/mod.py, and a run of it that took ``arcs``."""
    checkout = tmp_path / name
    (checkout / "autodist").mkdir(parents=True)
    (checkout / "autodist" / "mod.py").write_text(text)
    data = CoverageData(basename=str(tmp_path / (name + ".coverage")))
    data.add_arcs({str(checkout / "autodist" / "mod.py"): arcs})
    data.write()
    return [str(tmp_path / (name + ".coverage")), str(checkout)]


def test_what_is_no_longer_run_is_listed_where_the_lines_moved(tmp_path, capsys):
    argv = _run(tmp_path, "before", BEFORE, BEFORE_ARCS) + _run(tmp_path, "after", AFTER, AFTER_ARCS)
    assert _script().main(argv) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "autodist/mod.py:11: line covered before, not after: return 3",
        "autodist/mod.py:10: branch -10 -> 11 covered before, not after: def g():",
        "autodist/mod.py:11: branch 11 -> -10 covered before, not after: return 3",
        # the changed line 7, and the branches across it or across the added function, are not compared
        "lost: 1 lines, 2 branches; not compared (changed code): 1 lines, 4 branches"]


def test_the_same_run_loses_nothing(tmp_path, capsys):
    argv = _run(tmp_path, "before", BEFORE, BEFORE_ARCS) + _run(tmp_path, "again", BEFORE, BEFORE_ARCS)
    assert _script().main(argv) == 0
    assert "lost: 0 lines, 0 branches; not compared (changed code): 0 lines, 0 branches" in capsys.readouterr().out


def test_a_branch_no_longer_taken_is_listed(tmp_path, capsys):
    fewer = [arc for arc in BEFORE_ARCS if arc not in ((5, 7), (7, -4))]   # f(0) no longer runs
    argv = _run(tmp_path, "before", BEFORE, BEFORE_ARCS) + _run(tmp_path, "after", BEFORE, fewer)
    assert _script().main(argv) == 1
    out = capsys.readouterr().out
    assert "autodist/mod.py:7: line covered before, not after: return 2" in out
    assert "autodist/mod.py:5: branch 5 -> 7 covered before, not after: if x:" in out
