"""Write tests/durations.json, the seconds per test module that ``tests/sharding.py`` schedules by, from a run's
JUnit XML.

    bash scripts/test.sh --junitxml=/tmp/run.xml     # or any pytest run of the suite with --junitxml
    python scripts/durations.py /tmp/run.xml         # rewrites tests/durations.json (--out elsewhere)

Only the order in which the workers take the tests depends on it: the costliest groups and tests first.
"""
import argparse
import json
import os
import sys
import xml.etree.ElementTree as ElementTree

HOW = "python scripts/durations.py JUNIT.xml: [tests, seconds] per module of one run of the suite"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_path(classname, root=ROOT):
    """``tests/x/test_y.py`` of a JUnit classname (``tests.x.test_y`` or ``tests.x.test_y.TestClass``), or None."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if os.path.isfile(os.path.join(root, path)):
            return path
    return None


def durations(junit, root=ROOT):
    """``{module: [tests, seconds]}`` of the test cases in the JUnit XML file ``junit``."""
    modules = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        path = module_path(case.get("classname") or "", root)
        if path is not None:
            entry = modules.setdefault(path, [0, 0.0])
            entry[0] += 1
            entry[1] = round(entry[1] + float(case.get("time") or 0.0), 1)
    return dict(sorted(modules.items()))


def dumps(modules):
    """The file's text: one module a line, so that a refresh diffs by module."""
    lines = ["  {}: {}".format(json.dumps(path), json.dumps(entry)) for path, entry in modules.items()]
    return '{{\n "how": {},\n "modules": {{\n{}\n }}\n}}\n'.format(json.dumps(HOW), ",\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="the JUnit XML of a run of the suite (pytest --junitxml)")
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "durations.json"))
    args = parser.parse_args(argv)
    modules = durations(args.junit)
    if not modules:
        sys.exit("{}: no test case of a module under {} in it".format(args.junit, ROOT))
    with open(args.out, "w") as f:
        f.write(dumps(modules))
    print("{}: {} modules, {:.0f} s of tests".format(args.out, len(modules), sum(s for _, s in modules.values())))


if __name__ == "__main__":
    main()
