# Helpers shared by bench/spec_compare.sh and bench/mtp_compare.sh (sourced
# from the repository root; the scripts set MLLM, N and THREADS): where
# bench/compare.sh built llama.cpp (its default build), building its
# tools, and one engine's speculative run -> a table cell.

ROOT=$PWD
CACHE=$ROOT/.cache
V=${LLAMA_CPP_PY:-0.3.36}
# The build bench/compare.sh makes by default: native, or its AVX-512 one
# on a CPU that lists AMX (which neither engine uses).
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    BUILD=$CACHE/llama-build-$V-avx512
else
    BUILD=$CACHE/llama-build-$V
fi
BIN=$BUILD/bin

# build_llama_tools LOG TARGET...: llama.cpp's TARGETs in bench/compare.sh's
# AVX-512 build (configured there once).
build_llama_tools() {
    local log=$1
    shift
    [[ -f $BUILD/build.ninja ]] || fail "no llama.cpp build in $BUILD: run 'bash bench/compare.sh' once first"
    echo "building $* (log: $log)" >&2
    nice -n 19 "$CACHE/venv-compare/bin/cmake" --build "$BUILD" --target "$@" -j 2 >"$log" 2>&1 \
        || fail "building llama.cpp's tools failed; see $log"
    export LD_LIBRARY_PATH=$BIN
}

# ours ARGS...: `mllm bench --json ARGS` -> "plain_tps spec_tps acceptance".
# The KV cache in f16 (KV=f32 for ours' default), as llama.cpp's tools
# keep theirs: with f32 the verification steps' attention reads twice the
# bytes (ngram on the rewrite prompt 1.65x plain with f32, 1.96x with f16).
ours() {
    "$MLLM" bench -p 0 -n "$N" -r 3 -t "$THREADS" --kv-type "${KV:-f16}" --json "$@" 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)
ts = {r["test"]: r["avg_ts"] for r in v["results"]}
plain = next(t for k, t in ts.items() if k.endswith(" plain"))
spec = next(t for k, t in ts.items() if k.startswith("tg") and " " in k and not k.endswith(" plain"))
r = v["speculative"]["results"][0]
print("%.1f %.1f %.0f%%" % (plain, spec, 100 * r["acceptance"]))'
}

# theirs TOOL ARGS...: a llama.cpp speculative tool's output -> "tps
# acceptance". Its logger thread now and then loses the last lines at exit
# (seen once in ~10 runs of llama-speculative-simple): up to three tries.
theirs() {
    local out
    for _ in 1 2 3; do
        out=$(timeout 600 "$@" -n "$N" -t "$THREADS" --temp 0 -c 2048 2>&1 | python3 -c '
import re, sys
s = sys.stdin.read()
tps = re.findall(r"decoded\s+\d+ tokens in\s+[0-9.]+ seconds, speed:\s+([0-9.]+) t/s", s)
acc = re.findall(r"accept\s+=\s+([0-9.]+)%", s)
print(f"{float(tps[-1]):.1f} {float(acc[-1]):.0f}%" if tps and acc else "failed -")')
        [[ $out == failed* ]] || break
    done
    echo "$out"
}

# llama_tg GGUF: llama-bench's plain decode tokens/s over N tokens.
llama_tg() {
    "$BIN/llama-bench" -m "$1" -p 0 -n "$N" -t "$THREADS" -r 3 -o json 2>/dev/null | python3 -c '
import json, sys
print("%.1f" % json.load(sys.stdin)[0]["avg_ts"])'
}

# ratio A B: "A/Bx", or "-" where B is not a number (a failed run).
ratio() {
    python3 -c "import sys; a, b = sys.argv[1:]; print(f'{float(a) / float(b):.2f}x' if b[0].isdigit() else '-')" "$1" "$2"
}
