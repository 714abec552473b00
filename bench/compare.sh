#!/usr/bin/env bash
# Compares mllm with llama.cpp's llama-bench on the same GGUF files, with the
# same threads, in one run (the two engines alternate, never in parallel),
# and prints a ratio table. Not part of `cargo test`.
#
#   bash bench/compare.sh                       # pp512/tg128, 3 reps, threads "2 1"
#   PP=128 TG=32 REPS=1 THREADS=2 FILES=q4_0 bash bench/compare.sh   # quick
#   LONG=1 bash bench/compare.sh                # adds decode after depth 4096
#   VISION=1 FILES="" bash bench/compare.sh     # Qwen3-VL-2B image encoder only
#
# Settings (environment):
#   PP, TG, REPS      prompt length, generated tokens, repetitions (512, 128, 3)
#   THREADS           thread counts, space-separated ("2 1")
#   FILES             which GGUFs, space-separated: smollm2 (the real
#                     SmolLM2-135M-Instruct Q4_1) or any llama-quantize type
#                     name in lower case (f16, q4_0, q8_0, q4_k_m, q5_k_m,
#                     q6_k, q3_k_m, q2_k, iq4_xs, iq4_nl, q5_0, ...) of a
#                     random-weight Qwen3-0.6B ("q4_0 q8_0 smollm2";
#                     FILES="" runs none of them), e.g.
#                     FILES="q4_k_m q5_k_m q6_k q3_k_m iq4_xs" for the
#                     K-quant table
#   GGUFS             more GGUF files to compare, space-separated NAME=PATH
#                     (e.g. a random-checkpoint preset converted by
#                     tests/fixtures/gguf/make_family_ggufs.py --convert and
#                     llama-quantize), run after FILES
#   LONG=1            also time TG_DEPTH tokens of decode after DEPTH context
#                     tokens (DEPTH=4096, TG_DEPTH=64); slow
#   VISION=1          also time the Qwen3-VL-2B image encoder against
#                     llama-mtmd-cli (bench/vision.sh), q8_0 in both, for
#                     VISION_SIZES ("448 896"); installs convert_hf_to_gguf.py's
#                     packages (torch among them) on first use
#   ISA               which SIMD path both engines run ("" = the best this
#                     CPU has): ISA=avx2 builds a Haswell-class llama.cpp
#                     (.cache/llama-build-V-avx2: AVX2+FMA+F16C, no AVX-512,
#                     no AVX-VNNI; built on first use) and runs mllm with
#                     MLLM_QLINEAR_ISA=avx2, so an AVX-512 machine times what
#                     an AVX2-only CPU would run (VISION=1 then uses that
#                     build's llama-mtmd-cli too); ISA=avx512 builds
#                     llama.cpp with AVX-512 VNNI/BF16 and no AMX
#                     (.cache/llama-build-V-avx512), the default on CPUs
#                     that list AMX
#   MLLM_KV           mllm's --kv-type (f16, llama-bench's default cache type)
#   MLLM              the mllm binary (target/release/mllm)
#   LLAMA_CPP_PY      llama-cpp-python version whose sdist vendors llama.cpp
#   JOBS              build parallelism (2)
#   LLAMA_ARGS        extra llama-bench arguments, e.g. "--poll 0" (none)
#   MLLM_ARGS         extra mllm bench arguments, e.g. "--compiled" (none)
#
# First run (idempotent; each step is skipped when its output exists), all
# under .cache/ (git-ignored):
#   .cache/venv-compare/        python venv: cmake + ninja, later gguf-py and
#                               numpy for bench/qwen3_gguf.py
#   .cache/pip/                 the llama-cpp-python sdist
#   .cache/llama-cpp-python-V/  the sdist unpacked (llama.cpp: vendor/llama.cpp)
#   .cache/llama-build-V/       cmake build: bin/llama-bench, bin/llama-quantize
#   .cache/llama-build-V-ISA/   the same for ISA=... (llama-bench; the rest on demand)
#   .cache/gguf/qwen3-0.6b-random-TYPE.gguf   (f16, then one per FILES type)
#   .cache/compare/RUN/         raw JSON and /usr/bin/time logs of each run
# Needs: python3 (with venv and pip), a C/C++ compiler, GNU time at
# /usr/bin/time, the mllm binary, and the package registries (PyPI; npm for
# tests/fetch_assets.sh). Fails with a message naming what is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
PP="${PP:-512}" TG="${TG:-128}" REPS="${REPS:-3}"
THREADS="${THREADS:-2 1}"
FILES="${FILES-q4_0 q8_0 smollm2}"
GGUFS="${GGUFS:-}"
VISION="${VISION:-0}"
LONG="${LONG:-0}" DEPTH="${DEPTH:-4096}" TG_DEPTH="${TG_DEPTH:-64}"
MLLM_KV="${MLLM_KV:-f16}"
MLLM="${MLLM:-$ROOT/target/release/mllm}"
LLAMA_CPP_PY="${LLAMA_CPP_PY:-0.3.36}"
JOBS="${JOBS:-2}"
LLAMA_ARGS="${LLAMA_ARGS:-}" MLLM_ARGS="${MLLM_ARGS:-}"
ISA="${ISA:-}"

VENV="$CACHE/venv-compare"
PY="$VENV/bin/python"
SRC_TOP="$CACHE/llama-cpp-python-$LLAMA_CPP_PY"
LLAMA_SRC="$SRC_TOP/vendor/llama.cpp"
BUILD="$CACHE/llama-build-$LLAMA_CPP_PY"
# ggml's x86 switches for a CPU without AVX-512 or AVX-VNNI (Haswell to
# Alder Lake's efficiency cores); GGML_NATIVE=OFF so -march=native cannot
# bring them back.
# A native build on a CPU that lists AMX (Sapphire Rapids and later) uses
# ggml's AMX tiles for Q4_0/Q8_0 matmuls; on a VM that lists the flags
# without granting the tile state they die with SIGILL (`tilezero`, seen on
# an Intel Xeon VM), and mllm has no AMX path either: such CPUs get the
# AVX-512 build (ISA=avx512), which is what both engines then run.
if [[ -z "$ISA" ]] && grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    echo "== this CPU lists AMX: comparing with llama.cpp's AVX-512 build (ISA=avx512), not AMX" >&2
    ISA=avx512
fi
case "$ISA" in
    "") ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
    avx512)
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON
            -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
            -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
            -DGGML_AMX_BF16=OFF)
        BUILD="$BUILD-avx512"
        export MLLM_QLINEAR_ISA=avx512vnni ;;
    avx2)
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON
            -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF
            -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
            -DGGML_AMX_BF16=OFF)
        BUILD="$BUILD-avx2"
        export MLLM_QLINEAR_ISA=avx2 ;;
    *) echo "compare.sh: unknown ISA '$ISA' (known: avx2, avx512, or unset for the best this CPU has)" >&2; exit 1 ;;
esac
LLAMA_BENCH="$BUILD/bin/llama-bench"
LLAMA_QUANTIZE="$BUILD/bin/llama-quantize"
SMOL_GGUF="$CACHE/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_BASE="$CACHE/gguf/qwen3-0.6b-random"

fail() { echo "compare.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

# --- prerequisites -------------------------------------------------------------
[[ -x "$MLLM" ]] || fail "no mllm binary at $MLLM (build it: cargo build --release -p mllm-cli)"
command -v python3 >/dev/null || fail "python3 not found (needed for the venv, bench/qwen3_gguf.py and the table)"
command -v c++ >/dev/null || fail "no C++ compiler (c++) found to build llama.cpp"
if [[ ! -x /usr/bin/time ]]; then
    # GNU time gives llama-bench's peak RSS; install it where we can.
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        say "installing GNU time (apt-get install -y time)"
        apt-get install -y time >/dev/null || { apt-get update >/dev/null && apt-get install -y time >/dev/null; } \
            || fail "apt-get install time failed"
    else
        fail "/usr/bin/time (GNU time) missing: install the 'time' package"
    fi
fi

# --- python venv with cmake and ninja (PyPI wheels; no root needed) ----------
if [[ ! -x "$VENV/bin/cmake" || ! -x "$VENV/bin/ninja" ]]; then
    say "creating $VENV with cmake and ninja"
    python3 -m venv "$VENV" || fail "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$VENV/bin/pip" install -q cmake ninja || fail "pip install cmake ninja failed (is PyPI reachable?)"
fi

# --- llama.cpp source: the llama-cpp-python sdist vendors it ------------------
SDIST="$CACHE/pip/llama_cpp_python-$LLAMA_CPP_PY.tar.gz"
if [[ ! -f "$SDIST" ]]; then
    say "downloading the llama-cpp-python $LLAMA_CPP_PY sdist (~77 MB)"
    # --no-binary for this package only: with ':all:' pip would also build the
    # sdist's build requirements (cmake, ninja) from source just to read its
    # metadata, which takes very long on a small machine.
    timeout 900 "$VENV/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_CPP_PY" -d "$CACHE/pip" || fail "pip download llama-cpp-python==$LLAMA_CPP_PY failed"
    [[ -f "$SDIST" ]] || fail "pip download produced no $SDIST"
fi
if [[ ! -f "$LLAMA_SRC/CMakeLists.txt" ]]; then
    say "unpacking $SDIST"
    rm -rf "$SRC_TOP.part" && mkdir -p "$SRC_TOP.part"
    tar -xzf "$SDIST" -C "$SRC_TOP.part" --strip-components=1
    [[ -f "$SRC_TOP.part/vendor/llama.cpp/CMakeLists.txt" ]] || fail "$SDIST has no vendor/llama.cpp (layout changed?)"
    rm -rf "$SRC_TOP" && mv "$SRC_TOP.part" "$SRC_TOP"
fi

# --- build llama-bench (and llama-quantize when a GGUF is to be made) ---------
# build_llama TARGET...: configures $BUILD once, then builds the targets.
build_llama() {
    say "building $* in $BUILD (-j$JOBS; takes a while)"
    local start=$SECONDS log="$BUILD.log"
    if [[ ! -f "$BUILD/build.ninja" ]]; then
        # The build commit is stamped by hand: the vendored tree has no .git,
        # and cmake would otherwise pick up this repository's commit.
        nice -n 19 "$VENV/bin/cmake" -S "$LLAMA_SRC" -B "$BUILD" -G Ninja \
            -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" \
            -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_COMMIT="llama-cpp-python-$LLAMA_CPP_PY" -DLLAMA_BUILD_NUMBER=0 >"$log" 2>&1 \
            || { tail -20 "$log" >&2; fail "cmake configure of $LLAMA_SRC failed; see $log"; }
    fi
    nice -n 19 "$VENV/bin/cmake" --build "$BUILD" --target "$@" -j "$JOBS" >>"$log" 2>&1 \
        || { tail -20 "$log" >&2; fail "building $* failed; see $log"; }
    say "llama.cpp build took $((SECONDS - start)) s"
}
[[ -x "$LLAMA_BENCH" ]] || build_llama llama-bench

# --- GGUF files -------------------------------------------------------------------
# The random Qwen3-0.6B: mllm writes a Hugging Face directory,
# bench/qwen3_gguf.py makes an f16 GGUF of it as llama.cpp's
# convert_hf_to_gguf.py lays Qwen3 out (with only gguf-py and numpy: no
# torch), llama-quantize every other type from that f16 file, as the
# GGUF repositories people download are made.
need_qwen=0
for f in $FILES; do
    case "$f" in
        smollm2) ;;
        *[!a-z0-9_]*) fail "FILES entry '$f' is not a llama-quantize type name (e.g. q4_k_m, iq4_xs) or smollm2" ;;
        *) [[ -f "$QWEN_BASE-$f.gguf" ]] || need_qwen=1 ;;
    esac
done
if [[ $need_qwen == 1 && ! -f "$QWEN_BASE-f16.gguf" ]]; then
    if ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
        say "installing gguf-py (llama.cpp's vendored copy) and numpy into $VENV"
        "$VENV/bin/pip" install -q numpy "$LLAMA_SRC/gguf-py" || fail "pip install numpy gguf-py failed"
    fi
    [[ -f "$CACHE/npm/qwen3/tokenizer.json" ]] || bash "$ROOT/tests/fetch_assets.sh" \
        || fail "tests/fetch_assets.sh failed: the Qwen3 tokenizer is needed"
    hf="$CACHE/qwen3-0.6b-random-hf"
    say "writing a random Qwen3-0.6B checkpoint to $hf and converting it to f16 GGUF"
    rm -rf "$hf"
    "$MLLM" random-checkpoint --preset qwen3-0.6b --out "$hf" --seed 0 >/dev/null 2>&1 \
        || fail "$MLLM random-checkpoint --preset qwen3-0.6b failed"
    cp "$CACHE/npm/qwen3/tokenizer.json" "$CACHE/npm/qwen3/tokenizer_config.json" "$hf/"
    nice -n 19 "$PY" "$ROOT/bench/qwen3_gguf.py" "$hf" "$QWEN_BASE-f16.gguf.part" >"$CACHE/convert.log" 2>&1 \
        || fail "bench/qwen3_gguf.py failed; see $CACHE/convert.log"
    mv "$QWEN_BASE-f16.gguf.part" "$QWEN_BASE-f16.gguf"
    rm -rf "$hf"
fi
for q in $FILES; do
    if [[ $q != smollm2 && ! -f "$QWEN_BASE-$q.gguf" ]]; then
        [[ -x "$LLAMA_QUANTIZE" ]] || build_llama llama-quantize
        say "llama-quantize -> $QWEN_BASE-$q.gguf"
        "$LLAMA_QUANTIZE" "$QWEN_BASE-f16.gguf" "$QWEN_BASE-$q.gguf.part" "${q^^}" >"$CACHE/quantize-$q.log" 2>&1 \
            || fail "llama-quantize ${q^^} failed (is '$q' one of its types?); see $CACHE/quantize-$q.log"
        mv "$QWEN_BASE-$q.gguf.part" "$QWEN_BASE-$q.gguf"
    fi
done
if [[ " $FILES " == *" smollm2 "* && ! -f "$SMOL_GGUF" ]]; then
    bash "$ROOT/tests/fetch_assets.sh" || fail "tests/fetch_assets.sh failed: $SMOL_GGUF is needed"
fi

# --- the runs ---------------------------------------------------------------------
# Other work on the machine skews both engines (llama.cpp's spinning threads
# suffer most): the machine's busy CPU time (/proc/stat) is recorded around
# the runs, and table.py reports what other processes used meanwhile.
busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
OUT="$CACHE/compare/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
# A snapshot of the mllm binary: a cargo build running meanwhile would
# otherwise swap it between runs. Removed at exit (it is ~75 MB).
cp "$MLLM" "$OUT/mllm"
trap 'rm -f "$OUT/mllm"' EXIT
MLLM_VERSION="$("$OUT/mllm" --version) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo no-git)$(
    git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ', work tree dirty'))"
echo "start $(busy) $(date +%s.%N) $(getconf CLK_TCK) $(nproc)" >"$OUT/cpu.txt"
MANIFEST="$OUT/runs.tsv"   # name, engine, threads, json, time -v log
: >"$MANIFEST"

# run_pair KEY NAME GGUF THREADS TAG LLAMA_ARGS... -- MLLM_ARGS...: llama-bench
# first, then mllm, each under /usr/bin/time -v (for peak RSS).
run_pair() {
    local key="$1" name="$2" gguf="$3" t="$4" tag="$5"; shift 5
    local largs=() margs=()
    while [[ $1 != -- ]]; do largs+=("$1"); shift; done; shift
    margs=("$@")
    local base="$OUT/$key-t$t-$tag"
    say "llama-bench $name t=$t ${largs[*]}"
    # shellcheck disable=SC2086 # LLAMA_ARGS/MLLM_ARGS split into words on purpose
    /usr/bin/time -v -o "$base.llama.time" "$LLAMA_BENCH" -m "$gguf" -t "$t" -r "$REPS" -o json \
        $LLAMA_ARGS "${largs[@]}" >"$base.llama.json" 2>"$base.llama.err" \
        || fail "llama-bench failed on $gguf; see $base.llama.err"
    printf '%s\tllama.cpp\t%s\t%s\t%s\n' "$name" "$t" "$base.llama.json" "$base.llama.time" >>"$MANIFEST"
    say "mllm bench  $name t=$t ${margs[*]}"
    /usr/bin/time -v -o "$base.mllm.time" "$OUT/mllm" bench --model "$gguf" -t "$t" -r "$REPS" --json \
        --kv-type "$MLLM_KV" $MLLM_ARGS "${margs[@]}" >"$base.mllm.json" 2>"$base.mllm.err" \
        || fail "mllm bench failed on $gguf; see $base.mllm.err"
    printf '%s\tmllm\t%s\t%s\t%s\n' "$name" "$t" "$base.mllm.json" "$base.mllm.time" >>"$MANIFEST"
}

for f in $FILES; do
    if [[ $f == smollm2 ]]; then gguf="$SMOL_GGUF" name="SmolLM2-135M Q4_1"
    else gguf="$QWEN_BASE-$f.gguf" name="Qwen3-0.6B-random ${f^^}"; fi
    for t in $THREADS; do
        run_pair "$f" "$name" "$gguf" "$t" main -p "$PP" -n "$TG" -- -p "$PP" -n "$TG"
        if [[ $LONG == 1 ]]; then
            run_pair "$f" "$name" "$gguf" "$t" depth -p 0 -n "$TG_DEPTH" -d "$DEPTH" \
                -- -p 0 -n "$TG_DEPTH" -d "$DEPTH"
        fi
    done
done

for spec in $GGUFS; do
    name="${spec%%=*}" gguf="${spec#*=}"
    [[ $name != "$spec" && -f $gguf ]] || fail "GGUFS entry '$spec' is not NAME=PATH of an existing file"
    for t in $THREADS; do
        run_pair "gguf-$name" "$name" "$gguf" "$t" main -p "$PP" -n "$TG" -- -p "$PP" -n "$TG"
        if [[ $LONG == 1 ]]; then
            run_pair "gguf-$name" "$name" "$gguf" "$t" depth -p 0 -n "$TG_DEPTH" -d "$DEPTH" \
                -- -p 0 -n "$TG_DEPTH" -d "$DEPTH"
        fi
    done
done

if [[ $VISION == 1 ]]; then
    # shellcheck source=bench/vision.sh
    source "$ROOT/bench/vision.sh"
fi

echo "end $(busy) $(date +%s.%N)" >>"$OUT/cpu.txt"
echo "llama.cpp: llama-bench from the llama-cpp-python $LLAMA_CPP_PY sdist; mllm: $MLLM_VERSION, --kv-type $MLLM_KV"
[[ -z $ISA ]] || echo "ISA=$ISA: llama.cpp built in $BUILD, mllm run with MLLM_QLINEAR_ISA=$MLLM_QLINEAR_ISA"
echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); raw data: $OUT"
echo
python3 "$ROOT/bench/table.py" "$MANIFEST" "$OUT/vision.tsv"
