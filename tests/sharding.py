"""Which tests share a worker under ``pytest -n N --dist loadgroup`` (``scripts/test.sh``), and why.

Most tests are independent and each is scheduled alone, wherever a worker is
free: ports are the kernel's (port 0), the ``sshd`` fixture starts one sshd per
worker on a port of its own, job ids, cluster names and the kernel tests' key
bases are random or per process, files live under each test's ``tmp_path``,
environment changes are monkeypatched, and every process a test starts is
found again by its own job id. Tests that share something costly go to one
worker together, as an ``xdist_group`` (``group_of``):

- ``tests/multihost``: group ``multihost``. A module's emulated cluster is
  module-scoped, and one cluster at a time keeps the shaped links' figures
  those tests print comparable.
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

Larger groups are scheduled first (xdist's ``--loadscope-reorder``), so the
long pool and cluster groups start at once and the single tests fill in.
"""
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
        return "multihost"
    if "pools" in getattr(item, "fixturenames", ()):
        return "pool-{}".format(pool_topology(item) or "undeclared")
    return None
