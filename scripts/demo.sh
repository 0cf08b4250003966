#!/usr/bin/env bash
# Install autodist and run the demo: linear regression trained on a local two-node
# cluster (two loopback nodes, one TensorFlow server and one training process each).
# The loss is printed as training goes, from both nodes, above a progress line; runs/demo/loss.log
# and runs/demo/loss.png are written next to each other. Extra arguments go to the example
# (e.g. --strategy AllReduce; --verbose also shows TensorFlow's start-up messages).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" -m pip install -q -e ".[cpu,examples]"
exec "$PYTHON" examples/linear_regression.py --log-dir runs/demo "$@"
