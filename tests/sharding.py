"""Which tests share a worker under ``pytest -n N --dist loadgroup`` (``scripts/test.sh``), and why.

Most tests are independent and each is scheduled alone, wherever a worker is
free: ports are the kernel's (port 0), the ``sshd`` fixture starts one sshd per
worker on a port of its own, job ids, cluster names and the kernel tests' key
bases are random or per process, files live under each test's ``tmp_path``,
environment changes are monkeypatched, and every process a test starts is
found again by its own job id. Tests that share something costly go to one
worker together, as an ``xdist_group`` (``group_of``):

- ``tests/multihost``: group ``multihost-<module>``. A module's emulated
  cluster is module-scoped, so a module's tests run on one worker and make
  it once; clusters of different modules have their own names, namespaces,
  switches, sshds and Slurm daemons and run side by side. What would be
  distorted by a neighbour, the link rates read through shaped links, is
  marked ``exclusive`` (below); no other multihost test asserts a rate or a
  time.
- tests that use the equivalence tier's node pools (``pools``): group
  ``pool-<topology>``, the topology from the test's ``topology`` parameter or
  its ``@pytest.mark.pool("<topology>")`` (the ``pools`` fixture refuses any
  other). Each pool's node processes (TensorFlow servers that grow to about
  1.5 GB over a run) then exist once, as in a serial run, and the pools of
  different topologies run side by side.
- a test with its own ``@pytest.mark.xdist_group(name)`` keeps it.

Tests marked ``exclusive`` (they measure the machine: link rates through shaped
links) are not run beside another worker at all: ``scripts/test.sh`` runs the
rest on every worker, then those in a second pytest run of one process.

The costliest scopes are scheduled first (``scheduled_first``: a group's or a
test's cost estimated from ``tests/durations.json``, the last measured run's
seconds per module, refreshed with ``scripts/durations.py``), so the long
pool and cluster groups and the minutes-long single tests start at once and
the short tests fill in around them, instead of one of them running alone at
the end. A stale file only makes the order worse, never a test different.
"""
import json
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
MULTIHOST = os.path.join(TESTS, "multihost") + os.sep


def pool_topology(item):
    """The equivalence pool topology ``item`` declares (its ``pool`` mark, else its ``topology`` parameter), or None."""
    mark = item.get_closest_marker("pool")
    if mark is not None:
        return mark.args[0]
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("topology") if callspec is not None else None


def group_of(item):
    """The xdist group of a collected test, or None (scheduled alone); see the module docstring."""
    if item.get_closest_marker("xdist_group") is not None:
        return None   # its own
    if str(item.fspath).startswith(MULTIHOST):
        return "multihost-" + os.path.splitext(os.path.basename(str(item.fspath)))[0]
    if "pools" in getattr(item, "fixturenames", ()):
        return "pool-{}".format(pool_topology(item) or "undeclared")
    return None


DURATIONS = os.path.join(TESTS, "durations.json")   # AUTODIST_TEST_DURATIONS names another (a test of the order)
UNKNOWN_SECONDS = 1.0   # a test of a module the durations file does not list yet


def module_of(nodeid):
    """``tests/x/test_y.py`` of a test id (``tests/x/test_y.py::test_z[p]@group``)."""
    return nodeid.split("::")[0]


def load_durations(path=None):
    """``{module: (tests, seconds)}`` of the last measured run (``scripts/durations.py``), or {} without the file."""
    path = path or os.environ.get("AUTODIST_TEST_DURATIONS") or DURATIONS
    try:
        with open(path) as f:
            return {module: tuple(entry) for module, entry in json.load(f)["modules"].items()}
    except FileNotFoundError:
        return {}


def scheduled_first(items, durations):
    """``items`` with the costliest scheduling scopes first (longest processing time first), each scope's tests
    together and in their own order.

    A scope is an xdist group (its tests run on one worker) or a test alone. Its cost is the sum of its tests'
    estimates, a test's estimate its module's mean duration in ``durations``. Started last, a pool group or a
    minutes-long single test would run alone at the end while the other workers idle; started first, the short
    tests fill in around it. ``scripts/test.sh`` passes ``--no-loadscope-reorder`` so xdist keeps this order
    (its own orders the scopes by their number of tests)."""
    scopes = {}
    for index, item in enumerate(items):
        mark = item.get_closest_marker("xdist_group")
        key = ("group", mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else ("alone", index)
        scopes.setdefault(key, []).append(item)

    def estimate(item):
        tests, seconds = durations.get(module_of(item.nodeid), (1, UNKNOWN_SECONDS))
        return seconds / max(tests, 1)
    costs = {key: sum(estimate(item) for item in members) for key, members in scopes.items()}
    order = sorted(scopes, key=lambda key: -costs[key])   # stable: equal costs keep the collection's order
    return [item for key in order for item in scopes[key]]
