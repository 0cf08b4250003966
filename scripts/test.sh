#!/usr/bin/env bash
# Install autodist with its test dependencies, then run the whole test suite.
#   bash scripts/test.sh            # everything (about 40 minutes on 2 cores)
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# The SSH tests start their own sshd on a loopback port; the multi-host tests (tests/multihost, as root)
# make network namespaces with ip and tc. They need the binaries.
missing=""
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then missing="openssh-server"; fi
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then missing="$missing iproute2"; fi
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "note: $missing not installed and cannot be installed here; the SSH and multi-host tests will be skipped" >&2
  fi
fi

"$PYTHON" -m pip install -q -e ".[cpu,test]"
exec "$PYTHON" -m pytest "$@"
