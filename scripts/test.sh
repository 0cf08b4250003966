#!/usr/bin/env bash
# Install autodist with its test dependencies, then run the whole test suite.
#   bash scripts/test.sh            # everything (about 40 minutes on 2 cores)
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

# The SSH tests start their own sshd on a loopback port; the multi-host tests (tests/multihost, as root)
# make network namespaces with ip and tc, and run real Slurm (slurmctld, slurmd, munged) and Open MPI
# (mpirun, orted) on them. They need the binaries.
missing=""
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then missing="openssh-server"; fi
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then missing="$missing iproute2"; fi
if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ]; then missing="$missing slurm-wlm"; fi
if [ ! -x /usr/sbin/munged ]; then missing="$missing munge"; fi
if ! command -v mpirun >/dev/null 2>&1 || ! command -v orted >/dev/null 2>&1; then missing="$missing openmpi-bin"; fi
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "note: $missing not installed and cannot be installed here; the SSH, multi-host, Slurm and MPI tests" \
         "will be skipped (skip reasons start with slurm: and mpi: for those two)" >&2
  fi
fi

"$PYTHON" -m pip install -q -e ".[cpu,test]"
exec "$PYTHON" -m pytest "$@"
