#!/usr/bin/env bash
# Speculative decoding beside llama.cpp's own tools, same files, prompts and
# threads, in one run (issue #27 item 3):
#   ngram: real SmolLM2-135M-Instruct Q4_1; `mllm bench --spec-type ngram`
#          against `llama-lookup` (prompt lookup, --spec-draft-n-max 16)
#   draft: the same model requantized by llama-quantize --allow-requantize to
#          F16 (target) and Q4_0 (draft); `mllm bench --model-draft` against
#          `llama-speculative`
# over the quoting prompts of bench/spec_prompts (rendered through the chat
# template, greedy, at most N tokens). Prints a markdown table of decode
# tokens/s (ours plain and speculative, llama.cpp's plain (llama-bench tg)
# and speculative) and acceptance.
#
#   bash bench/spec_compare.sh            (THREADS=2 N=96 KV=f16 by default;
#                                          KV: our KV cache type, llama.cpp f16)
#
# Needs llama.cpp built by `bash bench/compare.sh` once (its cmake build of
# the llama-cpp-python sdist in .cache/llama-build-V, or -avx512 on an AMX
# CPU; this adds the llama-lookup and llama-speculative targets) and the SmolLM2 GGUF of
# tests/fetch_assets.sh. Timings move by 1.5x from minute to minute on a
# shared VM: compare within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/spec_lib.sh
source bench/spec_lib.sh
THREADS=${THREADS:-2}
N=${N:-96}
WORK=$CACHE/spec
mkdir -p "$WORK"
fail() { echo "spec_compare: $*" >&2; exit 1; }

Q41=$CACHE/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $Q41 ]] || fail "$Q41 is missing: run 'bash tests/fetch_assets.sh' first"
build_llama_tools "$WORK/build.log" llama-lookup llama-speculative llama-quantize llama-bench
F16=$WORK/smollm2-f16.gguf
Q40=$WORK/smollm2-q4_0.gguf
[[ -f $F16 ]] || "$BIN/llama-quantize" --allow-requantize "$Q41" "$F16" F16 2 >"$WORK/quantize.log" 2>&1
[[ -f $Q40 ]] || "$BIN/llama-quantize" --allow-requantize "$F16" "$Q40" Q4_0 2 >>"$WORK/quantize.log" 2>&1
echo "building mllm (release)" >&2
cargo build --release -q -p mllm-cli
MLLM=$ROOT/target/release/mllm

echo "| case | prompt | mllm plain | mllm spec | acceptance | llama.cpp tg$N | llama.cpp spec | acceptance | mllm spec / llama.cpp spec | mllm spec / mllm plain |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for kind in ngram draft; do
    if [[ $kind == ngram ]]; then target=$Q41; else target=$F16; fi
    tg=$(llama_tg "$target")
    for p in rewrite type_hints extract; do
        msgs=$(python3 -c 'import json, sys; print(json.dumps([{"role": "user", "content": open(sys.argv[1]).read()}]))' "bench/spec_prompts/$p.txt")
        printf '%s' "$msgs" >"$WORK/$p.json"
        "$MLLM" template -m "$target" --messages "$WORK/$p.json" >"$WORK/$p.txt"
        if [[ $kind == ngram ]]; then
            read -r plain spec acc < <(ours -m "$Q41" --spec-type ngram --prompt-file "bench/spec_prompts/$p.txt")
            read -r ltps lacc < <(theirs "$BIN/llama-lookup" -m "$Q41" -f "$WORK/$p.txt" --spec-draft-n-max 16)
        else
            read -r plain spec acc < <(ours -m "$F16" --model-draft "$Q40" --prompt-file "bench/spec_prompts/$p.txt")
            read -r ltps lacc < <(theirs "$BIN/llama-speculative" -m "$F16" -md "$Q40" -td "$THREADS" -f "$WORK/$p.txt" --spec-draft-n-max 16)
        fi
        echo "| $kind | $p | $plain | $spec | $acc | $tg | $ltps | $lacc | $(ratio "$spec" "$ltps") | $(ratio "$spec" "$plain") |"
    done
done
