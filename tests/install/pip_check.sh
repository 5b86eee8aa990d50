#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, then, from outside the source tree, the
# Python round trip (python_roundtrip.py: write + read + CPU decode through the installed
# package, which must load the library inside it) and the installed `mlakv` CLI.
# Prints how long the install took. Needs network access to PyPI (scikit-build-core, numpy).
# usage: tests/install/pip_check.sh [PYTHON]   (make pip-check; extra pip arguments in
#        PIP_CHECK_ARGS, e.g. "-C cmake.define.MLAKV_CUDA=AUTO")
set -euo pipefail
PY=${1:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
die() { echo "pip-check: FAILED: $*" >&2; exit 1; }

"$PY" -m venv "$TMP/venv" || die "$PY -m venv (Debian: apt-get install python3-venv)"
t0=$(date +%s%N)
# shellcheck disable=SC2086
"$TMP/venv/bin/python" -m pip install -q ${PIP_CHECK_ARGS:-} "$SRC" >"$TMP/pip.log" 2>&1 ||
    { cat "$TMP/pip.log"; die "pip install $SRC"; }
t1=$(date +%s%N)
echo "pip install . into a fresh venv: $(((t1 - t0) / 1000000)) ms" \
     "(build dependencies, numpy and the CMake build of the library and CLI)"
"$TMP/venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(mlakv|numpy) ' | tr -s ' ' | sed 's/^/  /'

cd "$TMP" # not the source tree: `import mlakv` must find the installed package
"$TMP/venv/bin/python" "$HERE/python_roundtrip.py" || die "python round trip"
"$TMP/venv/bin/mlakv" --version || die "installed mlakv CLI"
"$TMP/venv/bin/mlakv" capacity --model glm-5.2 --format nvfp4_ds_mla --budget 40GiB >/dev/null ||
    die "installed mlakv CLI: capacity"
echo "pip-check: passed"
