# `mllm serve` with and without `--spec-type ngram`: 4 greedy chat answers
# to the quoting prompts of bench/spec_prompts, all at once over 4 slots and
# one at a time, servers alternating 3 times; prints the best tokens/s
# (prompt time included) of each and whether the answers are the same.
#   python3 bench/serve_spec.py [MAX_TOKENS] [MODEL]   (after cargo build --release)
import json, os, subprocess, sys, threading, time, urllib.request, re
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model = sys.argv[2] if len(sys.argv) > 2 else root + "/.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
prompts = [open(f"{root}/bench/spec_prompts/{f}.txt").read().strip() for f in ["rewrite", "type_hints", "extract", "rewrite"]]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 96
def start(extra):
    p = subprocess.Popen([root + "/target/release/mllm", "serve", "-m", model, "--parallel", "4", "-t", "2", "--port", "0"] + extra,
                         stderr=subprocess.PIPE, text=True)
    while True:
        l = p.stderr.readline()
        if not l: raise SystemExit("server died")
        m = re.search(r"listening on http://(\S+)", l)
        if m: break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, m.group(1)
def ask(addr, prompt, out, i):
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": N}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://{addr}/v1/chat/completions", body, {"Content-Type": "application/json"}))
    v = json.load(r)
    out[i] = (v["usage"]["completion_tokens"], v["choices"][0]["message"]["content"])
def once(addr, conc):
    out = [None] * len(prompts)
    t = time.time()
    if conc:
        th = [threading.Thread(target=ask, args=(addr, p, out, i)) for i, p in enumerate(prompts)]
        [x.start() for x in th]; [x.join() for x in th]
    else:
        for i, p in enumerate(prompts): ask(addr, p, out, i)
    dt = time.time() - t
    return sum(o[0] for o in out) / dt, [o[1] for o in out]
res = {}
for rep in range(3):
    for name, extra in [("plain", []), ("ngram", ["--spec-type", "ngram"])]:
        p, addr = start(extra)
        once(addr, True)  # warm
        for conc in [True, False]:
            tps, texts = once(addr, conc)
            res.setdefault((name, conc), []).append(tps)
            res.setdefault(("texts", name, conc), texts)
        p.kill(); p.wait()
for conc in [True, False]:
    a, b = max(res[("plain", conc)]), max(res[("ngram", conc)])
    print(f"{'4 concurrent' if conc else 'one at a time'}: plain {a:.1f} tok/s, ngram {b:.1f} tok/s, ratio {b/a:.2f}; runs plain {['%.1f'%x for x in res[('plain',conc)]]} ngram {['%.1f'%x for x in res[('ngram',conc)]]}")
    print("same answers:", res[("texts","plain",conc)] == res[("texts","ngram",conc)])
