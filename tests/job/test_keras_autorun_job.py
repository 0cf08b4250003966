"""``autodist run`` of unmodified Keras ``fit`` scripts on two loopback nodes equals running them alone."""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jobtools import REPO, job_processes

pytestmark = pytest.mark.slow

LOOPBACK = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
EXAMPLE = os.path.join(REPO, "examples", "digits_fit_plain.py")


def _python(argv, timeout):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    done = subprocess.run([sys.executable] + argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def _printed(out, name, node=""):
    """The JSON value of the script's ``name <json>`` line, as ``node`` (a "[host] " prefix, or "") printed it."""
    found = re.findall(r"^" + re.escape(node + name) + r" (.*)$", out, re.M)
    assert len(found) == 1, out[-4000:]
    try:
        return json.loads(found[0])
    except ValueError:
        raise AssertionError("{} line of {!r} is not JSON: {!r}".format(name, node, found[0]))


def _close(actual, expected):
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for key in expected:
            np.testing.assert_allclose(actual[key], expected[key], rtol=1e-4, atol=1e-5, err_msg=key)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)


def test_unmodified_digits_fit_on_two_nodes_equals_running_it_alone():
    code, alone = _python([EXAMPLE, "--epochs", "3"], 200)
    assert code == 0, alone[-4000:]
    code, out = _python(["-m", "autodist", "run", "-r", LOOPBACK, EXAMPLE, "--epochs", "3"], 300)
    assert code == 0, out[-4000:]
    assert len(re.findall(r"^Epoch \d/3", out, re.M)) == 3, out[-4000:]   # Keras' epoch lines: the chief's only
    for name in ("history", "weights"):
        for node in ("", "[127.0.0.2] "):
            _close(_printed(out, name, node), _printed(alone, name))
    job_id = re.search(r"\[autodist\] job (\S+):", out).group(1)
    assert job_processes(job_id) == []


UNSEEDED = """
import json
import sys
import keras
import numpy as np

x = np.random.RandomState(0).randn(32, 4).astype(np.float32)
y = (x.sum(axis=1) > 0).astype(np.int32)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])   # no seed: each process draws its own
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=8, epochs=2, verbose=0)
sys.stdout.write("weights " + json.dumps([w.ravel().tolist() for w in model.get_weights()]) + "\\n")
"""


def test_an_unseeded_model_starts_from_the_chiefs_weights_on_every_node(tmp_path):
    script = tmp_path / "unseeded.py"
    script.write_text(textwrap.dedent(UNSEEDED))
    code, out = _python(["-m", "autodist", "run", "-r", LOOPBACK, "-s", "AllReduce", str(script)], 300)
    assert code == 0, out[-4000:]
    chief, worker = _printed(out, "weights"), _printed(out, "weights", "[127.0.0.2] ")
    for mine, theirs in zip(chief, worker):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)
