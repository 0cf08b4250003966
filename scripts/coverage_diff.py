"""The lines and branches of autodist/ that one run of the suite covered and another did not.

    python scripts/coverage_diff.py BEFORE_DATA BEFORE_CHECKOUT AFTER_DATA AFTER_CHECKOUT

BEFORE_DATA and AFTER_DATA are combined coverage data files (``scripts/coverage.sh OUT`` writes
``OUT/.coverage``) of runs in the checkouts BEFORE_CHECKOUT and AFTER_CHECKOUT. A file is matched
by its path inside ``autodist/``; where its text changed between the checkouts, its lines are
matched by their text (``difflib``): a line that changed, or a branch with lines added or removed
between its ends, is not compared (the counts are printed). Prints every line and branch covered before and not after,
with its source, then the totals; the exit status is 1 when anything was lost.
"""
import argparse
import difflib
import os
import sys

from coverage import CoverageData

PACKAGE = "autodist"


def measured(data_file, checkout):
    """``{path inside the package: (lines, arcs)}`` of a combined data file."""
    data = CoverageData(basename=data_file)
    data.read()
    root = os.path.join(os.path.realpath(checkout), PACKAGE) + os.sep
    found = {}
    for path in data.measured_files():
        real = os.path.realpath(path)
        if real.startswith(root):
            found[real[len(root):]] = (set(data.lines(path) or ()), set(data.arcs(path) or ()))
    return found


def line_map(before_text, after_text):
    """``{before line: after line}`` for the lines the two texts share (1-based)."""
    matcher = difflib.SequenceMatcher(None, before_text.splitlines(), after_text.splitlines(), autojunk=False)
    return {a + 1 + k: b + 1 + k for a, b, size in matcher.get_matching_blocks() for k in range(size)}


def _moved_arc(mapping, arc):
    """``arc`` in the other checkout, or None where it cannot be compared: an end on a changed line, or lines
    added or removed between its ends (negative ends, a code object's entry or exit, keep their sign)."""
    start, end = arc
    moved = [mapping.get(abs(n)) for n in arc]
    if None in moved or moved[1] - moved[0] != abs(end) - abs(start):
        return None
    return tuple(m if n > 0 else -m for m, n in zip(moved, arc))


def lost(before, after, sources):
    """``(lost lines, lost arcs, not compared)``, the first two ``{path: sorted}``, the last ``(lines, arcs)``
    counts; ``sources(path)`` gives the (before, after) texts of a file."""
    lines, arcs, skipped = {}, {}, [0, 0]
    for path, (old_lines, old_arcs) in sorted(before.items()):
        new_lines, new_arcs = after.get(path, (set(), set()))
        before_text, after_text = sources(path)
        mapping = line_map(before_text, after_text) if after_text is not None else {}
        gone = sorted(n for n in old_lines if n in mapping and mapping[n] not in new_lines)
        moved = {arc: _moved_arc(mapping, arc) for arc in old_arcs}
        gone_arcs = sorted(arc for arc, there in moved.items() if there is not None and there not in new_arcs)
        skipped[0] += sum(1 for n in old_lines if n not in mapping)
        skipped[1] += sum(1 for there in moved.values() if there is None)
        if gone:
            lines[path] = gone
        if gone_arcs:
            arcs[path] = gone_arcs
    return lines, arcs, tuple(skipped)


def _read(checkout, path):
    full = os.path.join(checkout, PACKAGE, path)
    if not os.path.exists(full):
        return None
    with open(full, encoding="utf-8") as f:
        return f.read()


def _report(lines, arcs, skipped, before_source, out):
    for path in sorted(set(lines) | set(arcs)):
        text = before_source(path).splitlines()
        for n in lines.get(path, ()):
            out.write("{}/{}:{}: line covered before, not after: {}\n".format(PACKAGE, path, n, text[n - 1].strip()))
        for start, end in arcs.get(path, ()):
            out.write("{}/{}:{}: branch {} -> {} covered before, not after: {}\n".format(
                PACKAGE, path, abs(start), start, end, text[abs(start) - 1].strip() if abs(start) <= len(text) else ""))
    out.write("lost: {} lines, {} branches; not compared (changed code): {} lines, {} branches\n".format(
        sum(map(len, lines.values())), sum(map(len, arcs.values())), *skipped))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before_data")
    parser.add_argument("before_checkout")
    parser.add_argument("after_data")
    parser.add_argument("after_checkout")
    args = parser.parse_args(argv)
    before = measured(args.before_data, args.before_checkout)
    after = measured(args.after_data, args.after_checkout)
    lines, arcs, skipped = lost(before, after, lambda p: (_read(args.before_checkout, p),
                                                          _read(args.after_checkout, p)))
    _report(lines, arcs, skipped, lambda p: _read(args.before_checkout, p), sys.stdout)
    return 1 if lines or arcs else 0


if __name__ == "__main__":
    sys.exit(main())
