#!/usr/bin/env bash
# mllm serve beside llama.cpp's llama-server on the same GGUF, same slots,
# same threads, in one run (one server at a time): total decode throughput
# and time to first token with 1, 4 and 8 concurrent streams
# (bench/serve_load.py). Not part of `cargo test`.
#
#   bash bench/serve_compare.sh
#   GGUF=.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf CONC="1 4" bash bench/serve_compare.sh
#
# Settings (environment):
#   GGUF        the model (.cache/gguf/qwen3-0.6b-random-q4_0.gguf, made by
#               bench/compare.sh)
#   SLOTS       slots of both servers (4); CTX tokens per slot (1024)
#   CONC        concurrent streams, space-separated ("1 4 8")
#   ROUNDS      rounds of CONC requests each (2); MAX_TOKENS per request (64)
#   THREADS     threads of both (2)
#   MLLM        the mllm binary (target/release/mllm)
# llama-server is built next to llama-bench by reconfiguring bench/compare.sh's
# build (.cache/llama-build-V) with the server on; run compare.sh once first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
GGUF="${GGUF:-$CACHE/gguf/qwen3-0.6b-random-q4_0.gguf}"
SLOTS="${SLOTS:-4}" CTX="${CTX:-1024}" CONC="${CONC:-1 4 8}"
ROUNDS="${ROUNDS:-2}" MAX_TOKENS="${MAX_TOKENS:-64}" THREADS="${THREADS:-2}"
MLLM="${MLLM:-$ROOT/target/release/mllm}"
LLAMA_CPP_PY="${LLAMA_CPP_PY:-0.3.36}"
VENV="$CACHE/venv-compare"
LLAMA_SRC="$CACHE/llama-cpp-python-$LLAMA_CPP_PY/vendor/llama.cpp"
BUILD="$CACHE/llama-build-$LLAMA_CPP_PY"
SERVER="$BUILD/bin/llama-server"
PORT_MLLM=18181 PORT_LLAMA=18182

fail() { echo "serve_compare.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

[[ -x "$MLLM" ]] || fail "no mllm binary at $MLLM (cargo build --release -p mllm-cli)"
[[ -f "$GGUF" ]] || fail "no $GGUF (bench/compare.sh makes the random Qwen3-0.6B GGUFs)"
[[ -f "$LLAMA_SRC/CMakeLists.txt" && -x "$VENV/bin/cmake" ]] || fail "run bench/compare.sh once first (it fetches and builds llama.cpp)"

if [[ ! -x "$SERVER" ]]; then
    say "building llama-server in $BUILD (takes a while)"
    start=$SECONDS
    log="$BUILD.server.log"
    nice -n 19 "$VENV/bin/cmake" -S "$LLAMA_SRC" -B "$BUILD" -DLLAMA_BUILD_SERVER=ON >"$log" 2>&1 \
        || { tail -20 "$log" >&2; fail "cmake reconfigure failed; see $log"; }
    nice -n 19 "$VENV/bin/cmake" --build "$BUILD" --target llama-server -j 2 >>"$log" 2>&1 \
        || { tail -20 "$log" >&2; fail "building llama-server failed; see $log"; }
    say "llama-server build took $((SECONDS - start)) s"
fi

pid=""
stop() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=""; }
trap stop EXIT

wait_up() {
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    fail "the server on port $1 did not come up"
}

run_load() {
    local label=$1 port=$2
    # One untimed request first: both servers warm up (page-in, graphs).
    python3 "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$port" --concurrency 1 \
        --rounds 1 --max-tokens 8 --label warmup >/dev/null
    for c in $CONC; do
        python3 "$ROOT/bench/serve_load.py" --url "http://127.0.0.1:$port" --concurrency "$c" \
            --rounds "$ROUNDS" --max-tokens "$MAX_TOKENS" --label "$label"
    done
}

say "mllm serve: $GGUF, $SLOTS slots, $THREADS threads"
"$MLLM" serve -m "$GGUF" --port $PORT_MLLM -p "$SLOTS" -c "$CTX" -t "$THREADS" --kv-type f16 \
    >/dev/null 2>"$CACHE/serve-mllm.log" &
pid=$!
wait_up $PORT_MLLM
run_load mllm $PORT_MLLM | tee "$CACHE/serve-mllm.jsonl"
stop

say "llama-server: same file, slots, threads"
"$SERVER" -m "$GGUF" --port $PORT_LLAMA --host 127.0.0.1 -np "$SLOTS" -c $((SLOTS * CTX)) \
    -t "$THREADS" >/dev/null 2>"$CACHE/serve-llama.log" &
pid=$!
wait_up $PORT_LLAMA
run_load llama-server $PORT_LLAMA | tee "$CACHE/serve-llama.jsonl"
stop

python3 - "$CACHE/serve-mllm.jsonl" "$CACHE/serve-llama.jsonl" <<'EOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
l = [json.loads(x) for x in open(sys.argv[2])]
print("| streams | mllm tok/s | llama-server tok/s | ratio | mllm TTFT mean/max s | llama-server TTFT mean/max s |")
print("|---:|---:|---:|---:|---:|---:|")
for a, b in zip(m, l):
    r = a["decode_tok_s"] / b["decode_tok_s"] if a["decode_tok_s"] and b["decode_tok_s"] else float("nan")
    print(f"| {a['concurrency']} | {a['decode_tok_s']} | {b['decode_tok_s']} | {r:.2f} | "
          f"{a['ttft_mean_s']}/{a['ttft_max_s']} | {b['ttft_mean_s']}/{b['ttft_max_s']} |")
    for x in (a, b):
        if x["errors"]:
            print(f"  {x['label']} errors: {x['errors']}")
EOF
