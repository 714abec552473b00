# The prefix cache (`--cache-ram`) on `mllm serve`: four ~1,300-token system
# prompts take turns over 2 slots, 16 streamed questions one after another
# (A B C D A B ...), so each prompt's slot has been taken by the time it
# comes back. Mean TTFT and wall time with the cache off (`--cache-ram 0`)
# and on (default), on the same binary, and whether every answer is the
# same in both runs.  python3 bench/serve_prefix_cache.py [BINARY]
# CACHE_RAM=MiB sets the second run's budget (4096): at 300 MiB the four
# prompts' pages fit (~60 MiB each) but not one copy per question.
import json, os, re, statistics, subprocess, sys, threading, time, http.client
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model = root + "/.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
binary = sys.argv[1] if len(sys.argv) > 1 else root + "/target/release/mllm"
places = ["Milton lending library", "Hartley bus station", "Corran swimming pool", "Ashby town museum"]
def system(k, place):
    return f"You are the help desk of the {place}. " + " ".join(
        f"Rule {i}: visitors may bring up to {(i + k) % 7 + 2} guests for {i * 3 + 7 + k} minutes, and each extra guest costs {(i * k) % 5 + 10} pence." for i in range(1, 60))
prompts = [system(k, p) for k, p in enumerate(places)]
requests = [(prompts[i % 4], f"What does rule {i + 1} say?") for i in range(16)]
def start(cache):
    p = subprocess.Popen([binary, "serve", "-m", model, "--parallel", "2", "-t", "2", "--port", "0", "--cache-ram", cache],
                         stderr=subprocess.PIPE, text=True)
    while True:
        m = re.search(r"listening on http://(\S+)", p.stderr.readline())
        if m: break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, m.group(1)
def ask(addr, sysp, q):
    host, port = addr.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    body = json.dumps({"messages": [{"role": "system", "content": sysp}, {"role": "user", "content": q}],
                       "temperature": 0, "max_tokens": 16, "stream": True})
    t = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    first, text = None, ""
    for line in c.getresponse():
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        v = json.loads(line[6:])
        if v.get("choices") and v["choices"][0]["delta"].get("content"):
            if first is None: first = time.time() - t
            text += v["choices"][0]["delta"]["content"]
    return first, text
answers = {}
budget = os.environ.get("CACHE_RAM", "4096")
for cache in ["0", budget]:
    p, addr = start(cache)
    t = time.time()
    out = [ask(addr, s, q) for s, q in requests]
    wall = time.time() - t
    m = http.client.HTTPConnection(*addr.split(":")); m.request("GET", "/metrics")
    metrics = m.getresponse().read().decode()
    hits = re.search(r"mllm_prompt_tokens_from_prefix_cache_total\{[^}]*\} (\d+)", metrics).group(1)
    held = re.search(r"mllm_prefix_cache_bytes\{[^}]*\} (\d+)", metrics).group(1)
    p.kill(); p.wait()
    tt = [o[0] for o in out]
    answers[cache] = [o[1] for o in out]
    print(f"--cache-ram {cache}: mean TTFT {statistics.mean(tt) * 1e3:.0f} ms (after the first round: "
          f"{statistics.mean(tt[4:]) * 1e3:.0f} ms), wall {wall:.1f} s, {hits} prompt tokens from the prefix cache, "
          f"{int(held) / 2**20:.0f} MiB held")
print("same answers:", answers["0"] == answers[budget])
