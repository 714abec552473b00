#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz + libFuzzer, tests/fuzz/): builds every
# target and runs each for SECONDS seconds (default 30) on its committed
# corpus (tests/fuzz/corpus/TARGET), one process at a time. Any crash, panic,
# timeout (-timeout, 10 s per input) or oversized allocation
# (-malloc_limit_mb, 1 GiB) fails the run; the input that did it is kept in
# tests/fuzz/artifacts/TARGET/ (ignored) and the command to replay it is
# printed.
#
#   bash tests/fuzz.sh [SECONDS] [TARGET...]
#
# FUZZ_FLAGS adds libFuzzer flags (they override the ones below).
#
# New inputs the run finds go to a temporary folder, so the committed corpus
# does not change; to grow it, run a target longer and minimize:
#   RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target/fuzz cargo fuzz run -O -a \
#     --fuzz-dir tests/fuzz TARGET tests/fuzz/corpus/TARGET -- -max_total_time=1200
#   ... cargo fuzz cmin -O -a --fuzz-dir tests/fuzz TARGET tests/fuzz/corpus/TARGET
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address); the stable
# toolchain accepts them with RUSTC_BOOTSTRAP=1. Targets build with
# optimizations, debug assertions and overflow checks (-O -a) under
# AddressSanitizer, into target/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="$PWD/target/fuzz"
# No allocation stacks in sanitizer reports (the crash's own stack stays):
# recording one per allocation is a third of the time of the pest parser.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}malloc_context_size=0"
fuzz=(--fuzz-dir tests/fuzz -O -a)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; installing it (cargo install cargo-fuzz)"
    cargo install cargo-fuzz --version 0.13.2 --locked
fi

start=$(date +%s)
cargo fuzz build "${fuzz[@]}"
echo "fuzz: built every target in $(($(date +%s) - start)) s"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir tests/fuzz)
fi

# One libFuzzer dictionary per target, from the shared pieces in dict/.
dict_parts() {
    case "$1" in
        mdl_check | mdl_run) echo mdl ;;
        gguf | gguf_vocab | mllm_file) echo gguf json ;;
        pytorch) echo pytorch ;;
        chat_template) echo chat_template json ;;
        image) echo image json ;;
        *) echo json ;;
    esac
}

# Flags of one target. chat_template: minijinja's values are reference
# counted, so a template that stores a namespace in itself
# (`{% set ns.x = ns %}`) leaks that cycle when the render ends; the leak is
# bounded by the render's fuel and is minijinja's to fix, so LeakSanitizer
# is off there (every other target keeps it). The .mdl targets parse with
# pest, slow under the sanitizer: shorter scripts give more runs.
extra_flags() {
    case "$1" in
        chat_template) echo -detect_leaks=0 ;;
        mdl_check) echo -max_len=4096 ;;
        mdl_run) echo -max_len=8192 ;;
    esac
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
    corpus="tests/fuzz/corpus/$t"
    if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
        echo "fuzz: $t has no committed corpus at $corpus" >&2
        failed+=("$t")
        continue
    fi
    dict="$work/$t.dict"
    cat tests/fuzz/dict/common.dict > "$dict"
    for p in $(dict_parts "$t"); do cat "tests/fuzz/dict/$p.dict" >> "$dict"; done
    mkdir -p "$work/new/$t" "$work/tmp" "tests/fuzz/artifacts/$t"
    echo "== fuzz $t (${secs} s)"
    t0=$(date +%s)
    # Scratch files of targets that write the input to disk go to $TMPDIR.
    status=0
    TMPDIR="$work/tmp" cargo fuzz run "${fuzz[@]}" "$t" "$work/new/$t" "$corpus" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=1024 \
        -dict="$dict" -artifact_prefix="tests/fuzz/artifacts/$t/" -print_final_stats=1 $(extra_flags "$t") ${FUZZ_FLAGS:-} \
        >"$work/$t.log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units)' "$work/$t.log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$work/$t.log"
        echo "fuzz: $t FAILED (exit $status); replay the input named above with:" >&2
        echo "  RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=target/fuzz cargo fuzz run ${fuzz[*]} $t tests/fuzz/artifacts/$t/FILE" >&2
        failed+=("$t")
    fi
    echo "fuzz: $t ran $(($(date +%s) - t0)) s"
done

echo "fuzz: ${#targets[@]} targets in $(($(date +%s) - start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: failed: ${failed[*]}" >&2
    exit 1
fi
