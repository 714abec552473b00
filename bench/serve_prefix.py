# Time to first token on `mllm serve` with a ~1,300-token system prompt shared
# by 32 streamed questions sent 50 ms apart (4 slots, 2 threads): mean and
# p95 TTFT and the wall time, for each mllm binary given (e.g. a build before
# and after a change).  python3 bench/serve_prefix.py BINARY [BINARY...]
import json, re, subprocess, sys, threading, time, http.client, statistics
import os
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model = root + "/.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
sysp = "You are the help desk of the Milton lending library. " + " ".join(
    f"Rule {i}: members may borrow up to {i % 7 + 2} books for {i * 3 + 7} days, and late returns cost {i % 5 + 10} pence a day." for i in range(1, 60))
qs = [f"What does rule {i} say about late returns?" for i in range(1, 33)]
def start(binary):
    p = subprocess.Popen([binary, "serve", "-m", model, "--parallel", "4", "-t", "2", "--port", "0"], stderr=subprocess.PIPE, text=True)
    while True:
        l = p.stderr.readline()
        m = re.search(r"listening on http://(\S+)", l)
        if m: break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, m.group(1)
def ask(addr, q, out):
    host, port = addr.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=300)
    body = json.dumps({"messages": [{"role": "system", "content": sysp}, {"role": "user", "content": q}], "temperature": 0, "max_tokens": 16, "stream": True})
    t = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None; text = ""
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        v = json.loads(line[6:])
        if v.get("choices") and v["choices"][0]["delta"].get("content"):
            if first is None: first = time.time() - t
            text += v["choices"][0]["delta"]["content"]
    out.append((first, time.time() - t, text))
for binary in sys.argv[1:]:
    p, addr = start(binary)
    warm = []; ask(addr, "Hello?", warm)
    out = []
    t = time.time()
    th = []
    for i, q in enumerate(qs):
        x = threading.Thread(target=ask, args=(addr, q, out)); x.start(); th.append(x)
        time.sleep(0.05)
    [x.join() for x in th]
    wall = time.time() - t
    tt = sorted(o[0] for o in out)
    print(f"{binary}: warm-up TTFT {warm[0][0]*1e3:.0f} ms; 32 requests: mean TTFT {statistics.mean(tt)*1e3:.0f} ms, p95 {tt[int(0.95*len(tt))-1]*1e3:.0f} ms, wall {wall:.1f} s")
    p.kill(); p.wait()
