"""Tiers of the suite that need something of the machine, and what a run does when one cannot run here.

A developer's run skips such a tier with the reason (``-ra`` prints it). A run that must not lose a
tier names it in ``AUTODIST_REQUIRE`` (comma-separated): CI's ``.ci/run`` exports
``AUTODIST_REQUIRE=cluster,tmpfs,k8s-sdk,ssh,slurm,mpi`` before ``bash scripts/test.sh``, and there a tier that
cannot run fails, naming itself and why, instead of leaving a green run with a tier missing.

    import tiers
    tiers.unavailable("cluster", reason)                     # in a fixture: skips, or fails if required
    schemas = tiers.importorskip("k8s-sdk", "jsonschema", "pip install jsonschema")

A new tier is a line in ``TIERS`` (and in ``.ci/run`` when CI must run it); an unknown name in
``AUTODIST_REQUIRE`` stops the run at its start (``tests/conftest.py``).
"""
import importlib
import os

import pytest

REQUIRE_ENV = "AUTODIST_REQUIRE"

#: tier -> what it is and what it needs
TIERS = {
    "cluster": "tests/multihost: jobs on emulated hosts (autodist cluster: network namespaces, ip and tc, as root)",
    "tmpfs": "tests on a small tmpfs that fills up (mount, as root)",
    "k8s-sdk": "tests/test_examples_kubernetes.py: the operators' CRD schemas checked (jsonschema, kubernetes-validate)",
    "slurm": "tests/multihost on a real Slurm of emulated hosts (slurm-wlm, munge: scripts/test.sh installs them)",
    "mpi": "tests with real Open MPI across emulated hosts (openmpi-bin: scripts/test.sh installs it)",
    "ssh": "tests that start their own sshd on loopback (openssh-server)",
}


def required(environ=None):
    """The tiers ``AUTODIST_REQUIRE`` names; a name that is not a tier is a ``pytest.UsageError`` naming it."""
    text = (os.environ if environ is None else environ).get(REQUIRE_ENV, "")
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(TIERS))
    if unknown:
        raise pytest.UsageError("{}={}: {} {} not a tier of the suite; the tiers are {}".format(
            REQUIRE_ENV, text, ", ".join(repr(n) for n in unknown), "is" if len(unknown) == 1 else "are",
            ", ".join(sorted(TIERS))))
    return names


def unavailable(tier, reason):
    """Tier ``tier`` cannot run here because of ``reason``: skip the test, or fail it when the tier is required."""
    if tier not in TIERS:
        raise KeyError("{!r} is not a tier of the suite (tests/tiers.py: TIERS)".format(tier))
    if tier in required():
        pytest.fail("the {} tier is required here ({}={}) but cannot run: {}. It is {}.".format(
            tier, REQUIRE_ENV, os.environ.get(REQUIRE_ENV), reason, TIERS[tier]), pytrace=False)
    pytest.skip("{} [the {} tier; {}={} would make this a failure]".format(reason, tier, REQUIRE_ENV, tier),
                allow_module_level=True)


def importorskip(tier, module, install):
    """``module``, imported; else the tier is unavailable (at a module's top: the whole module is skipped, or its
    collection fails, which stops the run at once)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = "cannot import {} ({}): {}".format(module, e, install)
    unavailable(tier, reason)
