#!/usr/bin/env bash
# Compares `mllm embed` with llama.cpp's `llama-embedding` on the same GGUF
# files (the real all-MiniLM-L6-v2 converted by llama.cpp's own
# convert_hf_to_gguf.py: f32, and q8_0 by llama-quantize), the same
# sentences (lines of this repository's docs) and the same threads, the two
# engines alternating (farm-bench --vs). Prints sentences per second and the
# ratio, and checks that both engines give the same vectors (cosine). Not
# part of `cargo test`.
#
#   bash bench/embed_compare.sh                 # 1000 sentences, 2 threads, 5 runs
#   N=200 RUNS=3 THREADS=1 bash bench/embed_compare.sh
#
# Needs what bench/compare.sh needs (it reuses its llama.cpp source and
# build directories under .cache/ and builds llama-embedding there), the
# release mllm (cargo build --release -p mllm-cli), farm-bench, and python
# packages for convert_hf_to_gguf.py: $CONVERT_PY (a python with torch,
# transformers and llama.cpp's gguf-py) or, when unset, they are installed
# into .cache/venv-compare as bench/compare.sh installs them (~4.5 GB).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
N="${N:-1000}" RUNS="${RUNS:-5}" THREADS="${THREADS:-2}"
MLLM="${MLLM:-$ROOT/target/release/mllm}"
LLAMA_CPP_PY="${LLAMA_CPP_PY:-0.3.36}"
VENV="$CACHE/venv-compare"
SRC_TOP="$CACHE/llama-cpp-python-$LLAMA_CPP_PY"
LLAMA_SRC="$SRC_TOP/vendor/llama.cpp"
BUILD="$CACHE/llama-build-$LLAMA_CPP_PY"
OUT="$CACHE/embed-bench"
MINILM="$CACHE/minilm/all-MiniLM-L6-v2"

fail() { echo "embed_compare.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

[[ -x "$MLLM" ]] || fail "no mllm binary at $MLLM (build it: cargo build --release -p mllm-cli)"
command -v farm-bench >/dev/null || fail "farm-bench not found (it times both engines, paired)"
bash "$ROOT/tests/fetch_minilm.sh" >/dev/null || fail "tests/fetch_minilm.sh failed"
mkdir -p "$OUT"

# --- llama.cpp: the source bench/compare.sh unpacks, llama-embedding built --
if [[ ! -x "$BUILD/bin/llama-embedding" || ! -x "$BUILD/bin/llama-quantize" ]]; then
    if [[ ! -f "$LLAMA_SRC/CMakeLists.txt" || ! -x "$VENV/bin/cmake" ]]; then
        say "no llama.cpp source or cmake yet: running bench/compare.sh's setup (FILES='' REPS=1 PP=8 TG=8)"
        FILES="" REPS=1 PP=8 TG=8 THREADS=1 bash "$ROOT/bench/compare.sh" >/dev/null ||
            fail "bench/compare.sh could not set up llama.cpp"
    fi
    say "building llama-embedding and llama-quantize in $BUILD"
    [[ -f "$BUILD/build.ninja" ]] || nice -n 19 "$VENV/bin/cmake" -S "$LLAMA_SRC" -B "$BUILD" -G Ninja \
        -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_COMMIT="llama-cpp-python-$LLAMA_CPP_PY" -DLLAMA_BUILD_NUMBER=0 >"$BUILD.log" 2>&1 ||
        fail "cmake configure failed; see $BUILD.log"
    nice -n 19 "$VENV/bin/cmake" --build "$BUILD" --target llama-embedding llama-quantize -j 2 >>"$BUILD.log" 2>&1 ||
        fail "building llama-embedding failed; see $BUILD.log"
fi

# --- the GGUFs ----------------------------------------------------------------
PY="${CONVERT_PY:-$VENV/bin/python}"
if [[ ! -f "$OUT/minilm-f32.gguf" ]]; then
    if ! "$PY" -c 'import torch, transformers, gguf' 2>/dev/null; then
        [[ -z "${CONVERT_PY:-}" ]] || fail "$CONVERT_PY lacks torch, transformers or gguf"
        say "installing convert_hf_to_gguf.py's packages into $VENV (torch from PyPI, ~4.5 GB)"
        reqs="$LLAMA_SRC/requirements"
        sed '/^--extra-index-url/d' "$reqs/requirements-convert_hf_to_gguf.txt" >"$reqs/compare-sh.txt"
        "$VENV/bin/pip" install -q -r "$reqs/compare-sh.txt" "$LLAMA_SRC/gguf-py" || fail "pip install failed"
    fi
    say "converting all-MiniLM-L6-v2 to GGUF with llama.cpp's converter"
    "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$MINILM" --outtype f32 --outfile "$OUT/minilm-f32.gguf.part" \
        >"$OUT/convert.log" 2>&1 || fail "convert_hf_to_gguf.py failed; see $OUT/convert.log"
    mv "$OUT/minilm-f32.gguf.part" "$OUT/minilm-f32.gguf"
fi
if [[ ! -f "$OUT/minilm-q8_0.gguf" ]]; then
    "$BUILD/bin/llama-quantize" "$OUT/minilm-f32.gguf" "$OUT/minilm-q8_0.gguf" Q8_0 >"$OUT/quantize.log" 2>&1 ||
        fail "llama-quantize failed; see $OUT/quantize.log"
fi

# --- the sentences: lines of prose from this repository's docs ---------------
python3 - "$ROOT" "$N" >"$OUT/sentences.txt" <<'PY'
import glob, re, sys
root, n = sys.argv[1], int(sys.argv[2])
out = []
for f in sorted(glob.glob(root + "/docs/*.md")) + [root + "/README.md"]:
    for line in open(f, encoding="utf-8"):
        t = re.sub(r"\s+", " ", re.sub(r"[`*_#>|\[\]()]", " ", line)).strip()
        if 40 <= len(t) <= 300 and not t.startswith("-"):
            out.append(t)
while len(out) < n:
    out += out
print("\n".join(out[:n]))
PY
TOKENS=$("$MLLM" embed -m "$OUT/minilm-f32.gguf" --file "$OUT/sentences.txt" -t "$THREADS" 2>&1 >/dev/null |
    sed -n 's/.*(\([0-9]*\) tokens).*/\1/p')
say "$N sentences, $TOKENS tokens (with [CLS]/[SEP]), $THREADS threads"

# --- agreement: the same vectors from both engines ----------------------------
head -n 50 "$OUT/sentences.txt" >"$OUT/agree.txt"
for q in f32 q8_0; do
    g="$OUT/minilm-$q.gguf"
    "$MLLM" embed -m "$g" --file "$OUT/agree.txt" --json -t "$THREADS" >"$OUT/mllm-$q.json" 2>/dev/null
    "$BUILD/bin/llama-embedding" -m "$g" -f "$OUT/agree.txt" -t "$THREADS" --pooling mean \
        --embd-output-format json >"$OUT/llama-$q.json" 2>/dev/null
    python3 - "$OUT/mllm-$q.json" "$OUT/llama-$q.json" "$q" <<'PY'
import json, math, sys
a, b = (json.load(open(p))["data"] for p in sys.argv[1:3])
assert len(a) == len(b), (len(a), len(b))
def cos(x, y):
    return sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))
c = [cos(x["embedding"], y["embedding"]) for x, y in zip(a, b)]
print(f"{sys.argv[3]}: mllm vs llama-embedding over {len(c)} sentences: worst cosine {min(c):.6f}, mean {sum(c)/len(c):.6f}")
PY
done

# --- speed: whole commands, paired ------------------------------------------
# llama-embedding with its own batch sizes: its fastest here (-b/-ub 8192
# took 1.6x as long: it attends over the whole micro-batch under a mask).
for q in f32 q8_0; do
    g="$OUT/minilm-$q.gguf"
    say "$q: mllm embed (A) vs llama-embedding (B)"
    farm-bench -n "$RUNS" --timeout 1200 \
        --vs "$BUILD/bin/llama-embedding -m $g -f $OUT/sentences.txt -t $THREADS --pooling mean" \
        -- "$MLLM" embed -m "$g" --file "$OUT/sentences.txt" -t "$THREADS"
done
