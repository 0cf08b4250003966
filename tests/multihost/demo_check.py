"""``examples/linear_regression.py`` computed here in float64, and the check of a run of it against that.

The example prints each node's learned weights to 3 decimals, and 29 and 30
steps differ by at most 1.2e-3 there: a tolerance wider than the rounding
would let a lost step pass. So the check also reads the chief's ``loss.log``
(``--log-dir``: the loss of the chief's rows at every step, 6 decimals), which
a lost or repeated step shifts from that step on.
"""
import re

import numpy as np

BATCH, RATE, EXAMPLES = 64, 0.1, 4096
LEARNED = re.compile(r"^(\[\S+\] )?\[node (\d)\] learned w = \[([^\]]*)\] b = (\S+)", re.M)
#: the printed weights' rounding (3 decimals: 5e-4), and float32 training against float64 (~1e-6)
WEIGHTS_ATOL = 6e-4
#: loss.log's rounding (6 decimals: 5e-7) and float32 against float64 in the loss itself
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6


def data():
    rng = np.random.RandomState(0)
    x = rng.randn(EXAMPLES, 3).astype(np.float32)
    y = (x @ np.array([3.0, -2.0, 0.5], np.float32) + 1.0 + 0.1 * rng.randn(EXAMPLES)).astype(np.float32)
    return x, y


def reference(steps, nodes):
    """SGD on the global batch: (w, b, [the chief's loss at each step]); the chief feeds the first of ``nodes``
    equal parts of every batch."""
    x, y = data()
    w, b, chief_losses = np.zeros(3), 0.0, []
    for step in range(steps):
        start = step * BATCH % EXAMPLES
        residual = x[start:start + BATCH] @ w + b - y[start:start + BATCH]
        chief_losses.append(float(np.mean(np.square(residual[:BATCH // nodes]))))
        w = w - RATE * 2.0 / BATCH * x[start:start + BATCH].T @ residual
        b = b - RATE * 2.0 / BATCH * residual.sum()
    return w, b, chief_losses


def check(output, loss_log, steps, nodes):
    """The run's printed weights (every node) and the chief's loss log equal ``reference(steps, nodes)``."""
    w, b, losses = reference(steps, nodes)
    learned = LEARNED.findall(output)
    assert sorted(node for _, node, _, _ in learned) == [str(i) for i in range(nodes)], output[-3000:]
    for _, node, weights, bias in learned:
        np.testing.assert_allclose([float(v) for v in weights.split()], w, rtol=0, atol=WEIGHTS_ATOL,
                                   err_msg="node {}'s weights".format(node))
        np.testing.assert_allclose(float(bias), b, rtol=0, atol=WEIGHTS_ATOL, err_msg="node {}'s bias".format(node))
    logged = [line.split() for line in loss_log.splitlines() if line.strip()]
    assert [int(step) for step, _ in logged] == list(range(1, steps + 1)), loss_log[-2000:]
    np.testing.assert_allclose([float(loss) for _, loss in logged], losses, rtol=LOSS_RTOL, atol=LOSS_ATOL,
                               err_msg="the chief's loss per step")
    return learned


def printed(steps, nodes):
    """What a run of ``steps`` steps on ``nodes`` nodes prints and logs, formatted as the example formats it."""
    w, b, losses = reference(steps, nodes)
    output = "".join("[node {}] learned w = {} b = {:.3f} (true [ 3.  -2.   0.5] 1.0)\n".format(
        node, np.round(w.astype(np.float32), 3), b) for node in range(nodes))
    return output, "".join("{} {:.6f}\n".format(step + 1, loss) for step, loss in enumerate(losses))
