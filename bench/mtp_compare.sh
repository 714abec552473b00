#!/usr/bin/env bash
# Qwen3.5's MTP head beside llama.cpp's (`--spec-type draft-mtp` of
# llama-speculative-simple), same GGUF, prompts and threads, in one run
# (issue #27 item 3c):
#   trained: tests/fixtures/qwen3_5_mtp/trained (a byte-level Qwen3.5 with
#            its head trained on Python source: real acceptance) converted by
#            llama.cpp's convert_hf_to_gguf.py with the head kept (F32), over
#            its four held-out prompts (reference.json) and 200 bytes of
#            held-out string.py
#   0.8b:    (BIG=1) the random-weight 0.8B-shaped model of
#            bench/mtp_random_model.py, F16 GGUF then llama-quantize Q8_0:
#            random weights guess nothing, so this is the cost side
# Greedy, N tokens (end-of-sequence ignored by mllm bench; llama.cpp stops
# there), at most DRAFT guesses a step in both engines. Prints a markdown
# table of decode tokens/s (ours plain and with the head, llama.cpp's plain
# (llama-bench tg) and with its head) and acceptance.
#
#   bash bench/mtp_compare.sh          (THREADS=2 N=128 DRAFT=3 by default)
#
# Needs llama.cpp built by `bash bench/compare.sh` once (its cmake build of
# the llama-cpp-python sdist in .cache/llama-build-V, or -avx512 on an AMX
# CPU; this adds the llama-speculative-simple target) and the fixtures' transformers venv
# (.cache/venv-fixtures, tests/fixtures/requirements-fixtures.txt) for the
# converter. The fixture's tokenizer is bytes without merges: llama.cpp
# refuses a "gpt2" vocabulary without tokenizer.ggml.merges, so its copy of
# each file gets one merge of two NUL bytes (absent from every prompt, so
# both engines split the prompts into the same byte tokens); the tensors are
# the same bytes. Timings move by 1.5x from minute to minute on a shared VM:
# compare within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/spec_lib.sh
source bench/spec_lib.sh
LLAMA_SRC=$CACHE/llama-cpp-python-$V/vendor/llama.cpp
PY=$CACHE/venv-fixtures/bin/python
THREADS=${THREADS:-2}
N=${N:-128}
DRAFT=${DRAFT:-3}
BIG=${BIG:-0}
WORK=$CACHE/mtpcmp
mkdir -p "$WORK"
fail() { echo "mtp_compare: $*" >&2; exit 1; }

[[ -x $PY ]] || fail "no $PY: make the fixtures' venv (tests/fixtures/requirements-fixtures.txt)"
build_llama_tools "$WORK/build.log" llama-speculative-simple llama-quantize llama-bench
echo "building mllm (release)" >&2
cargo build --release -q -p mllm-cli
MLLM=$ROOT/target/release/mllm

# convert DIR OUT TYPE: llama.cpp's converter, the MTP layer kept.
convert() {
    [[ -f $2 ]] || "$PY" tests/fixtures/gguf/make_family_ggufs.py --llama-cpp "$LLAMA_SRC" \
        --convert "$1" --mtp --outfile "$2" --outtype "$3" >"$WORK/convert.log" 2>&1 \
        || fail "converting $1 failed; see $WORK/convert.log"
}
# llama_copy IN OUT: the same file with one merge (NUL NUL) for llama.cpp.
llama_copy() {
    [[ -f $2 ]] || "$PY" - "$LLAMA_SRC" "$1" "$2" 2>>"$WORK/convert.log" <<'EOF' || fail "adding a merge to $1 failed; see $WORK/convert.log"
import sys
llama, src, dst = sys.argv[1:]
sys.path.insert(0, f"{llama}/gguf-py")
sys.path.insert(0, f"{llama}/gguf-py/gguf/scripts")
import gguf
from gguf_new_metadata import MetadataDetails, copy_with_new_metadata
reader = gguf.GGUFReader(src)
arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
nul = "\u0100"  # GPT-2's byte-level character for byte 0
merges = MetadataDetails(gguf.GGUFValueType.ARRAY, [f"{nul} {nul}"], sub_type=gguf.GGUFValueType.STRING)
copy_with_new_metadata(reader, writer, {gguf.Keys.Tokenizer.MERGES: merges}, [])
EOF
}

TRAINED=$WORK/trained-f32.gguf
convert tests/fixtures/qwen3_5_mtp/trained "$TRAINED" f32
llama_copy "$TRAINED" "$WORK/trained-f32.llama.gguf"
"$PY" - "$WORK" <<'EOF'
import json, sys
work = sys.argv[1]
ref = json.load(open("tests/fixtures/qwen3_5_mtp/trained/reference.json"))
for i, p in enumerate(ref["prompts"]):
    open(f"{work}/prompt{i}.txt", "wb").write(bytes(p["prompt"]))
EOF
CASES=()
for i in 0 1 2 3; do CASES+=("trained prompt$i $TRAINED $WORK/prompt$i.txt"); done
if [[ $BIG == 1 ]]; then
    [[ -d $CACHE/mtp-0.8b ]] || "$PY" bench/mtp_random_model.py "$CACHE/mtp-0.8b"
    convert "$CACHE/mtp-0.8b" "$WORK/mtp-0.8b-f16.gguf" f16
    Q8=$WORK/mtp-0.8b-q8_0.gguf
    [[ -f $Q8 ]] || "$BIN/llama-quantize" "$WORK/mtp-0.8b-f16.gguf" "$Q8" Q8_0 2 >"$WORK/quantize.log" 2>&1 \
        || fail "llama-quantize failed; see $WORK/quantize.log"
    llama_copy "$Q8" "$WORK/mtp-0.8b-q8_0.llama.gguf"
    CASES+=("0.8b prompt0 $Q8 $WORK/prompt0.txt")
fi

echo "| model | prompt | mllm plain | mllm mtp | acceptance | llama.cpp tg$N | llama.cpp mtp | acceptance | mllm mtp / llama.cpp mtp | mllm mtp / mllm plain |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for c in "${CASES[@]}"; do
    read -r model prompt gguf file <<<"$c"
    theirs_gguf=${gguf%.gguf}.llama.gguf
    tg=$(llama_tg "$theirs_gguf")
    read -r plain spec acc < <(ours -m "$gguf" --spec-type mtp --draft-max "$DRAFT" --prompt-file "$file")
    read -r ltps lacc < <(theirs "$BIN/llama-speculative-simple" -m "$theirs_gguf" -f "$file" \
        --spec-type draft-mtp --spec-draft-n-max "$DRAFT")
    echo "| $model | $prompt | $plain | $spec | $acc | $tg | $ltps | $lacc | $(ratio "$spec" "$ltps") | $(ratio "$spec" "$plain") |"
done
