#!/usr/bin/env bash
# Builds the `mllm` Python module the way a user installs it (`pip install
# ./python`, maturin from PyPI) into a venv at .cache/python-venv, then runs
# python/tests with pytest (the SmolLM2 GGUF from tests/fetch_assets.sh and
# the tiny Qwen3-VL fixture), the Ray examples (python/examples/) on a local
# two-node Ray cluster among them (ray[serve,data] from PyPI, pinned). The
# build reuses the repository's target/ and its dev profile
# (MATURIN_PEP517_ARGS), so crates `cargo test` compiled are
# not compiled again; a plain `pip install ./python` makes a release build.
# Exits non-zero when the build or a test fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.cache/python-venv"
MATURIN_VERSION="1.16.0"
PYTEST_VERSION="9.2.0"
RAY_VERSION="2.60.0"

if [[ ! -x "$VENV/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
# The pip build backend runs `maturin` from PATH.
export PATH="$VENV/bin:$PATH"
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "maturin==$MATURIN_VERSION" "pytest==$PYTEST_VERSION" "ray[serve,data]==$RAY_VERSION"

# The build below reuses target/ only if both workspaces resolve every
# shared crate alike; say so (and how to fix it) before six minutes of
# compiling tell.
"${PYTHON:-python3}" "$ROOT/python/same_build.py"

start=$(date +%s)
# --no-build-isolation: the pinned maturin above builds it (no fresh
# build environment per run).
CARGO_TARGET_DIR="$ROOT/target" MATURIN_PEP517_ARGS="--profile dev" \
    "$VENV/bin/pip" install --disable-pip-version-check --no-build-isolation \
    --force-reinstall --no-deps "$ROOT/python"
echo "pip install ./python took $(($(date +%s) - start)) s"

cd "$ROOT"
"$VENV/bin/python" -m pytest -p no:cacheprovider python/tests -q
