"""model.fit/evaluate/predict on two loopback nodes equal single-device Keras (every node checks)."""
import os
import re
import subprocess
import sys

import pytest

from jobtools import REPO, SCRIPTS

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")


@pytest.mark.parametrize("kind,builder", [("dense", "PS"), ("embedding", "AllReduce")])
def test_fit_on_two_nodes_equals_single_device(kind, builder):
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, "keras_fit_job.py"), LOOPBACK, builder, kind],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = re.findall(r"KERAS_FIT node=(\d) keys=(\w+) history=(\S+) evaluate=(\S+) predict=(\S+)", output)
    assert sorted(line[0] for line in lines) == ["0", "1"], output[-4000:]
    for _, keys, *diffs in lines:
        assert keys == "True"
        assert max(float(d) for d in diffs) < 1e-4, lines
