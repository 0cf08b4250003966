#!/usr/bin/env bash
# Install autodist with its test dependencies, then run the whole test suite on every core.
#   bash scripts/test.sh                  # everything (pytest-xdist: one worker per core, plus one)
#   bash scripts/test.sh --fast           # the edit-test loop: no multi-process or emulated-host tier (<= 5 min)
#   bash scripts/test.sh tests/x.py -k y  # extra arguments go to pytest; -n 0 runs in one process
# Without arguments the tests marked 'exclusive' run last, alone (a second pytest run).
# Workers: AUTODIST_TEST_WORKERS (default: cores + 1; the tests spend part of their time waiting on the processes
# they start, and a third worker on 2 cores kept them 165% busy instead of 145%). Tests that share a node pool or an
# emulated cluster run on one worker together (tests/sharding.py). AUTODIST_REQUIRE=cluster,tmpfs,...
# makes a tier that cannot run here fail instead of skip (CI sets it: .ci/run, tests/tiers.py).
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
# AUTODIST_TEST_RUNNER: what runs pytest (scripts/coverage.sh: "coverage run -m pytest")
read -r -a runner <<< "${AUTODIST_TEST_RUNNER:-pytest}"
# --no-loadscope-reorder (pytest-xdist 3.8): xdist keeps the order tests/sharding.py gives (the costliest first)
workers=(-n "${AUTODIST_TEST_WORKERS:-$(( $(nproc) + 1 ))}" --dist loadgroup --no-loadscope-reorder)
if [ "${1:-}" = "--fast" ]; then
  shift
  exec "$PYTHON" -m "${runner[@]}" "${workers[@]}" -m "not slow and not cluster" "$@"
elif [ "$#" -gt 0 ]; then
  exec "$PYTHON" -m "${runner[@]}" "${workers[@]}" "$@"
fi
# The whole suite: everything on every worker, then the tests that measure the machine (marked
# 'exclusive': link rates read through shaped links) in one process, with no other worker beside them.
status=0
"$PYTHON" -m "${runner[@]}" "${workers[@]}" -m "not exclusive" || status=$?
"$PYTHON" -m "${runner[@]}" -m exclusive || status=$?
exit "$status"
