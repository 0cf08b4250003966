#!/usr/bin/env bash
# Install autodist with its test dependencies, then run the whole test suite.
#   bash scripts/test.sh            # everything (about 20 minutes on 2 cores)
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# The SSH tests start their own sshd on a loopback port; they need the binary.
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  else
    echo "note: openssh-server is not installed and cannot be installed here; the SSH tests will be skipped" >&2
  fi
fi

"$PYTHON" -m pip install -q -e ".[cpu,test]"
exec "$PYTHON" -m pytest "$@"
