"""README.md's "Try a multi-host job on one machine", run as written, from a directory holding only the examples.

The block's commands run in order, each as its own process, as a user types
them: ``sudo`` is dropped (the tier runs as root), ``python`` and ``autodist``
are this interpreter's, and every ``autodist cluster`` command names a cluster
of this test's own (``--name``), so it runs beside other clusters. The
examples take the 3 nodes (before: "the global batch (64) must split evenly
over 3 nodes") and train as one device on the global batch.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from clustertools import Cluster, cannot_make_reason

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADING = "## Try a multi-host job on one machine"


def readme_block():
    """The indented command lines of the README's section, without their comments."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text[text.index(HEADING):]
    section = section[:section.index("\n## ", len(HEADING))]
    return [line.strip().split("  #")[0].strip() for line in section.splitlines() if line.startswith("    sudo ")]


def as_run_here(line, name):
    """``line``'s argv: without sudo, with this interpreter, the cluster ``name`` given to every cluster command."""
    words = shlex.split(line)[1:]   # sudo
    if words[:2] == ["autodist", "cluster"]:
        words = words[:3] + ["--name", name] + words[3:]   # autodist cluster ACTION --name NAME ...
    argv = []
    for i, word in enumerate(words):
        program = i == 0 or words[i - 1] == "--"
        if program and word == "autodist":
            argv += [sys.executable, "-m", "autodist"]
        else:
            argv.append(sys.executable if program and word == "python" else word)
    return argv


def _weights(output, node):
    lines = re.findall(r"^{}weights (\{{.*\}})$".format(re.escape(node)), output, re.M)
    assert lines, output[-3000:]
    return json.loads(lines[-1])


def test_the_readme_block_runs_as_written(tmp_path):
    reason = cannot_make_reason()
    if reason:
        pytest.skip(reason)
    block = readme_block()
    lines = block[:7]   # the rest, Slurm on 2 hosts, is tests/multihost/test_multihost_slurm.py's sbatch run
    assert lines[0].startswith("sudo autodist cluster up -n 3") and lines[-1].startswith("sudo autodist cluster down")
    assert [line.split()[:6] for line in block[7:]] == [
        ["sudo", "autodist", "cluster", "up", "-n", "2"],
        ["sudo", "autodist", "cluster", "exec", "0", "--"]], block[7:]
    assert "--slurm" in block[7] and block[8].endswith("sbatch -N 2 examples/slurm/train.sbatch")
    shutil.copytree(os.path.join(ROOT, "examples"), str(tmp_path / "examples"))
    cluster = Cluster(3, "1gbit", tmp_path)   # its name and leftovers; the block makes and removes it
    cluster.spec = str(tmp_path / "cluster.yml")
    outputs = []
    try:
        for line in lines:
            done = subprocess.run(as_run_here(line, cluster.name), cwd=str(tmp_path), capture_output=True, text=True,
                                  timeout=600)
            outputs.append(done.stdout + done.stderr)
            assert done.returncode == 0, "{}\n{}".format(line, outputs[-1][-4000:])
    finally:
        if len(outputs) < len(lines):
            cluster.down()
    made, linear, unmodified, _, calibrated, _, removed = outputs
    assert "cluster {!r} is up: 3 node(s)".format(cluster.name) in made
    errors = [float(e) for e in re.findall(r"\[node \d\] max weight error ([\d.]+)", linear)]
    assert len(errors) == 3 and max(errors) < 0.05, linear[-3000:]
    alone = subprocess.run([sys.executable, "examples/unmodified_train.py", "--steps", "20"], cwd=str(tmp_path),
                           capture_output=True, text=True, timeout=300)
    expected = _weights(alone.stdout, "")
    for node in ("", "[10.77.0.2] ", "[10.77.0.3] "):   # 16 rows over 3 nodes: 5, 5, 6, as one device on all 16
        got = _weights(unmodified, node)
        for name in expected:
            assert got[name] == pytest.approx(expected[name], rel=1e-4, abs=1e-5), (node, name)   # float sums
    slow = re.search(r"link 10\.77\.0\.3\s+([\d.]+) Mbit/s", calibrated)   # node 2, reshaped to 100 Mbit/s
    assert slow and float(slow.group(1)) < 300, calibrated[-3000:]
    assert "removed" in removed and cluster.leftovers() == []
