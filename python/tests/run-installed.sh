#!/usr/bin/env bash
# Runs python/tests against the sophon package as pip installs it, offline:
# a venv in a temporary folder (--system-site-packages, for Debian's torch and
# numpy), `pip install --no-index` of python/, then the unittest suite with
# the venv's python from outside the repository, so that `import sophon`
# finds the installed copy (tests/sophonpath.py checks it lies in the venv):
# the loader's tests, one example and test_installed.py (the installed files
# are python/sophon's).
#
#   python/tests/run-installed.sh            # PYTHON=/usr/bin/python3 by default
#
# Without a working `python3 -m venv` (Debian: apt-get install python3-venv)
# it skips, or fails when CI=true.
set -euo pipefail

PYTHON=${PYTHON:-/usr/bin/python3}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$PYTHON" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1; then
  cat "$work/venv.log"
  if [ "${CI:-}" = true ]; then
    echo "FAIL python/tests (installed): CI=true but $PYTHON -m venv failed (apt-get install python3-venv)"
    exit 1
  fi
  echo "SKIP python/tests (installed): $PYTHON -m venv failed (apt-get install python3-venv)"
  exit 0
fi

# Build from a copy of what the package is made of: pip builds in the source
# tree, and a stale build/ there could slip old files into the wheel.
mkdir "$work/src"
cp -r "$src/pyproject.toml" "$src/README.md" "$src/sophon" "$src/build_backend" "$work/src/"
# --no-index and no find-links or build-isolation settings from the
# environment: the install must need nothing but the venv and Debian's packages.
env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_NO_BUILD_ISOLATION \
  "$work/venv/bin/pip" install --quiet --no-index --disable-pip-version-check "$work/src"

cd "$work"
where=$("$work/venv/bin/python" -c 'import sophon; print(sophon.__file__)')
case "$where" in
  "$work/venv/"*) echo "python/tests against the installed package: sophon $("$work/venv/bin/python" -c 'import sophon; print(sophon.__version__)') at $where" ;;
  *) echo "FAIL: the venv imports sophon from $where, not from $work/venv"; exit 1 ;;
esac
# The loader's suite, one example as a program and the check that the installed
# files are python/sophon's, byte for byte: with that, the other examples
# (python/tests/test_examples.py, 15 CPU-s of PyTorch start-ups) would run the
# same code as they did from the repository.
SOPHON_TEST_INSTALLED="$work/venv" "$work/venv/bin/python" -m unittest discover -s "$src/tests" -t "$src/tests" \
  -k 'test_loader.' -k 'test_installed.' -k 'test_examples.ExampleTest.test_max_steps_stops_mid_epoch'
