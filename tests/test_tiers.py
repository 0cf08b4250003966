"""A tier that cannot run skips on a developer's machine and fails where ``AUTODIST_REQUIRE`` names it (``tiers.py``).

The machine's refusals are made real for a child ``pytest``: an ``ip`` that is
refused network namespaces (as in a container without CAP_SYS_ADMIN), a
``mount`` that is refused, a ``jsonschema`` that cannot be imported; the child
runs one test of the tier, with CI's own ``AUTODIST_REQUIRE`` (read from
``.ci/run``) and without it.
"""
import os
import re
import subprocess
import sys

import pytest

import tiers

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
REFUSED = "#!/bin/sh\necho 'RTNETLINK answers: Operation not permitted' >&2\nexit 2\n"

#: tier -> (a test of it, how the machine refuses it: {"bin": {name: script}} or {"python": {path: text}})
CASES = {
    "cluster": ("tests/multihost/test_cluster_command.py::test_up_exec_link_down_and_nothing_is_left",
                {"bin": {"ip": REFUSED}}),
    "tmpfs": ("tests/runner/test_node_log.py::test_a_full_log_disk_stops_the_logs_not_the_job",
              {"bin": {"mount": "#!/bin/sh\necho 'mount: permission denied' >&2\nexit 32\n"}}),
    "k8s-sdk": ("tests/test_examples_kubernetes.py",
                {"python": {"jsonschema/__init__.py": "raise ImportError('jsonschema refused by the test')\n"}}),
}


def ci_requires():
    """The value ``.ci/run`` exports as ``AUTODIST_REQUIRE``."""
    with open(os.path.join(REPO, ".ci", "run")) as f:
        found = re.findall(r"^export {}=(\S+)$".format(tiers.REQUIRE_ENV), f.read(), re.M)
    assert len(found) == 1, "{} is not exported once in .ci/run".format(tiers.REQUIRE_ENV)
    return found[0]


def _child(tmp_path, test, refusal, require):
    """``pytest test`` in a child process on a machine that refuses the tier; (exit code, output)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "python"), os.environ.get("PYTHONPATH", "")]))
    env.pop(tiers.REQUIRE_ENV, None)
    if require is not None:
        env[tiers.REQUIRE_ENV] = require
    for name, text in refusal.get("bin", {}).items():
        (tmp_path / "bin").mkdir(exist_ok=True)
        (tmp_path / "bin" / name).write_text(text)
        (tmp_path / "bin" / name).chmod(0o755)
    env["PATH"] = os.pathsep.join([str(tmp_path / "bin"), env["PATH"]])
    for path, text in refusal.get("python", {}).items():
        (tmp_path / "python" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "python" / path).write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-o", "addopts=-ra", test], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_ci_requires_every_tier_and_runs_the_readmes_command():
    assert set(ci_requires().split(",")) == set(tiers.TIERS)
    with open(os.path.join(REPO, ".ci", "run")) as f:
        commands = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert commands[-1] == "bash scripts/test.sh"   # the README's command, nothing else
    with open(os.path.join(REPO, "README.md")) as f:
        assert "`bash scripts/test.sh`" in f.read()


@pytest.mark.parametrize("tier", sorted(CASES))
def test_a_required_tier_that_cannot_run_fails_naming_itself(tier, tmp_path):
    test, refusal = CASES[tier]
    code, output = _child(tmp_path, test, refusal, ci_requires())
    assert code in (1, 2), output[-3000:]   # a test failed; or a module's collection (the SDK's import) did
    assert "the {} tier is required here ({}={}) but cannot run".format(tier, tiers.REQUIRE_ENV, ci_requires()) \
        in output, output[-3000:]


@pytest.mark.parametrize("tier", sorted(CASES))
def test_elsewhere_it_is_skipped_with_the_reason(tier, tmp_path):
    test, refusal = CASES[tier]
    code, output = _child(tmp_path, test, refusal, None)
    assert code in (0, 5) and "skipped" in output and "passed" not in output, output[-3000:]   # 5: a module skipped
    assert "[the {} tier; {}={} would make this a failure]".format(tier, tiers.REQUIRE_ENV, tier) in output


def test_namespaces_refused_is_the_reason_given(tmp_path):
    _, output = _child(tmp_path, CASES["cluster"][0], CASES["cluster"][1], "cluster")
    assert "cannot make a network namespace here: RTNETLINK answers: Operation not permitted" in output, output


def test_an_unknown_tier_is_a_usage_error_naming_it():
    with pytest.raises(pytest.UsageError, match="'clutser' is not a tier of the suite; the tiers are cluster, "):
        tiers.required({tiers.REQUIRE_ENV: "clutser,tmpfs"})
    assert tiers.required({tiers.REQUIRE_ENV: " cluster, tmpfs ,"}) == {"cluster", "tmpfs"}
    assert tiers.required({}) == set()


def test_unavailable_skips_or_fails(monkeypatch):
    monkeypatch.delenv(tiers.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"no sshd \[the ssh tier; AUTODIST_REQUIRE=ssh would make"):
        tiers.unavailable("ssh", "no sshd")
    monkeypatch.setenv(tiers.REQUIRE_ENV, "ssh")
    with pytest.raises(pytest.fail.Exception, match=r"the ssh tier is required here \(AUTODIST_REQUIRE=ssh\) but "
                                                    r"cannot run: no sshd\. It is tests that start their own sshd"):
        tiers.unavailable("ssh", "no sshd")
    with pytest.raises(KeyError, match="'shh' is not a tier"):
        tiers.unavailable("shh", "no sshd")
