#!/usr/bin/env bash
# Installs the Python side of the ONNX export checks into an ignored venv,
# .cache/onnx-venv/ at the repository root: onnxruntime (the engine that
# runs the exported graphs), onnx (its checker and shape inference) and
# numpy, pinned, from PyPI with pip. The ONNX tests call this script; it is
# idempotent (a venv whose pinned imports work is left alone) and prints the
# venv's python on its last line. Exits non-zero with a message naming what
# failed. Needs python3 with the venv module (or virtualenv) and PyPI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.cache/onnx-venv"
PY="$VENV/bin/python"
# Versions with wheels for CPython 3.9-3.13 on x86_64 and aarch64 Linux.
PKGS=(onnxruntime==1.20.1 onnx==1.17.0 "numpy<2.3")

fail() {
    echo "tests/onnx/setup.sh: $*" >&2
    exit 1
}

ready() {
    [[ -x "$PY" ]] && "$PY" -c "import onnxruntime, onnx, numpy; assert onnxruntime.__version__ == '1.20.1' and onnx.__version__ == '1.17.0'" 2>/dev/null
}

if ready; then
    echo "onnx venv: present" >&2
    echo "$PY"
    exit 0
fi

command -v python3 >/dev/null || fail "python3 not found; it is needed for the onnxruntime checks"
# A half-made venv from an interrupted run is rebuilt from scratch.
rm -rf "$VENV"
mkdir -p "$ROOT/.cache"
python3 -m venv "$VENV" 2>/dev/null || python3 -m virtualenv "$VENV" >/dev/null ||
    fail "could not create a venv at $VENV (install python3-venv)"
echo "onnx venv: pip install ${PKGS[*]}" >&2
"$PY" -m pip install --quiet --disable-pip-version-check "${PKGS[@]}" >&2 ||
    fail "pip install ${PKGS[*]} into $VENV failed (is PyPI reachable?)"
ready || fail "the venv at $VENV was installed but does not import onnxruntime/onnx/numpy at the pinned versions"
echo "onnx venv: installed at $VENV" >&2
echo "$PY"
