# mllm serve beside llama-server (issue #31 item 5): a ~1,000-token system
# prompt shared by 32 streamed short questions sent 50 ms apart, 4 slots,
# 2 threads, the same GGUF, one server at a time in the same run. Prints
# mean and p95 time to first token, total generated tokens per second of
# wall time, and how many answers differ from a cold run of the same prompt
# (mllm: `mllm run --temp 0` alone; llama-server: the request alone on a
# fresh server with `cache_prompt: false`).
#
#   python3 bench/serve_prefix_compare.py [MLLM [LLAMA_SERVER [GGUF]]]
#
# Build llama-server beside llama-bench first (bench/serve_compare.sh does,
# or: cmake -S LLAMA_SRC -B BUILD -DLLAMA_BUILD_SERVER=ON && cmake --build
# BUILD --target llama-server). Not part of `cargo test`.
import json, os, re, statistics, subprocess, sys, threading, time, http.client

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
mllm = sys.argv[1] if len(sys.argv) > 1 else root + "/target/release/mllm"
llama = sys.argv[2] if len(sys.argv) > 2 else root + "/.cache/llama-build-0.3.36-avx512/bin/llama-server"
model = sys.argv[3] if len(sys.argv) > 3 else root + "/.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
SLOTS, THREADS, MAX_TOKENS = 4, 2, 16
system = "You are the help desk of the Milton lending library. " + " ".join(
    f"Rule {i}: members may borrow up to {i % 7 + 2} books for {i * 3 + 7} days, and late returns cost {i % 5 + 10} pence a day."
    for i in range(1, 45))
questions = [f"What does rule {i} say about late returns?" for i in range(1, 33)]


def wait_up(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"the server on port {port} exited")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"the server on port {port} did not come up")


def start(engine, port):
    if engine == "mllm":
        cmd = [mllm, "serve", "-m", model, "--port", str(port), "--parallel", str(SLOTS), "-t", str(THREADS),
               "-c", "2048"]
    else:
        cmd = [llama, "-m", model, "--port", str(port), "--host", "127.0.0.1", "-np", str(SLOTS),
               "-c", str(SLOTS * 2048), "-t", str(THREADS)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_up(port, p)
    return p


def ask(port, q, extra=None):
    """(time to first token, total time, answer, content chunks)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
            "temperature": 0, "max_tokens": MAX_TOKENS, "stream": True}
    body.update(extra or {})
    t = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    first, text, chunks = None, "", 0
    for line in c.getresponse():
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        v = json.loads(line[6:])
        delta = v.get("choices") and v["choices"][0].get("delta", {}).get("content")
        if delta:
            if first is None:
                first = time.time() - t
            text += delta
            chunks += 1
    return first, time.time() - t, text, chunks


def load(engine, port):
    p = start(engine, port)
    ask(port, "Hello?")  # warm-up: page-in, graphs
    out, threads = [None] * len(questions), []
    t = time.time()
    for i, q in enumerate(questions):
        th = threading.Thread(target=lambda i=i, q=q: out.__setitem__(i, ask(port, q)))
        th.start()
        threads.append(th)
        time.sleep(0.05)
    [th.join() for th in threads]
    wall = time.time() - t
    p.kill()
    p.wait()
    return out, wall


def cold(engine, port):
    if engine == "mllm":
        answers = []
        for q in questions:
            r = subprocess.run([mllm, "run", "-m", model, "--system", system, "--prompt", q, "--temp", "0",
                                "-n", str(MAX_TOKENS), "-t", str(THREADS)], capture_output=True, text=True)
            answers.append(r.stdout.rstrip("\n"))
        return answers
    p = start(engine, port)
    answers = [ask(port, q, {"cache_prompt": False})[2] for q in questions]
    p.kill()
    p.wait()
    return answers


rows = []
for engine, port in [("mllm", 18191), ("llama-server", 18192)]:
    out, wall = load(engine, port)
    ref = cold(engine, port)
    tt = sorted(o[0] for o in out)
    rows.append((engine, statistics.mean(tt), tt[int(0.95 * len(tt)) - 1], sum(o[3] for o in out) / wall, wall,
                 sum(o[2] != r for o, r in zip(out, ref))))
    print(f"{engine}: done in {wall:.1f} s", file=sys.stderr)
print(f"{len(questions)} requests, ~1,000-token shared system prompt, {SLOTS} slots, {THREADS} threads, "
      f"{os.path.basename(model)}")
print("| server | TTFT mean s | TTFT p95 s | tokens/s (wall) | wall s | answers differing from cold |")
print("|---|---:|---:|---:|---:|---:|")
for e, mean, p95, tps, wall, diff in rows:
    print(f"| {e} | {mean:.2f} | {p95:.2f} | {tps:.1f} | {wall:.1f} | {diff} of {len(questions)} |")
m, l = rows
print(f"mllm / llama-server: TTFT mean {m[1] / l[1]:.2f}x, p95 {m[2] / l[2]:.2f}x, tokens/s {m[3] / l[3]:.2f}x")
