#!/usr/bin/env bash
# Branch coverage of autodist/ by the suite, every process it starts included (chiefs, nodes, pools).
#   bash scripts/coverage.sh OUT                    # the whole suite, as scripts/test.sh runs it
#   bash scripts/coverage.sh OUT tests/kernel -x    # extra arguments go to pytest
# runs pytest as scripts/test.sh does (it is that script, with coverage), writes OUT/.coverage
# (combined), OUT/report.txt (per file, branches included) and OUT/pytest.log, and prints the total. To list
# what one run covered and another did not (both checkouts on disk):
#   python scripts/coverage_diff.py BEFORE/.coverage BEFORE_CHECKOUT AFTER/.coverage AFTER_CHECKOUT
# Settings: [tool.coverage.*] in pyproject.toml (branch, subprocesses, the autodist package).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
out=$(realpath -m "${1:?usage: bash scripts/coverage.sh OUT [pytest arguments]}")
shift
mkdir -p "$out"
export COVERAGE_FILE="$out/.coverage"   # every process writes its own $COVERAGE_FILE.<host>.<pid>.<random>
export COVERAGE_RCFILE="$PWD/pyproject.toml"
"$PYTHON" -m coverage erase
status=0
AUTODIST_TEST_RUNNER="coverage run -m pytest" bash scripts/test.sh "$@" 2>&1 | tee "$out/pytest.log" || status=$?
"$PYTHON" -m coverage combine -q
"$PYTHON" -m coverage report > "$out/report.txt"
tail -n 1 "$out/report.txt"
exit "$status"
