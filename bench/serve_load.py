#!/usr/bin/env python3
"""Load for an OpenAI-compatible server (mllm serve, llama-server): N
concurrent streaming chat requests, each asking for exactly MAX_TOKENS
tokens (greedy, no stop), several rounds. Prints one JSON line: total
decode throughput (generated tokens / wall time from the first request
to the last token), mean and worst time to first token, and errors.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 --concurrency 4

Only the standard library: it runs anywhere the server does.
"""

import argparse
import http.client
import json
import threading
import time
import urllib.parse

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how rain forms, step by step.",
    "Describe a busy market in the morning.",
    "List the planets and one fact about each.",
    "Tell me about the history of bicycles.",
    "What makes a good cup of coffee?",
    "Describe the life cycle of a butterfly.",
    "Explain what a compiler does.",
]


def one(url, model, prompt, max_tokens, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        # llama-server: keep generating past EOS so every engine produces
        # the same number of tokens.
        "ignore_eos": True,
    }
    if model:
        body["model"] = model
    t0 = time.perf_counter()
    first = None
    tokens = 0
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            out.append({"error": f"HTTP {r.status}: {r.read()[:200]!r}"})
            return
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens", tokens)
            for c in chunk.get("choices", []):
                if c.get("delta", {}).get("content") and first is None:
                    first = time.perf_counter() - t0
        out.append({"ttft": first if first is not None else float("nan"),
                    "tokens": tokens, "end": time.perf_counter()})
    except Exception as e:  # noqa: BLE001 - reported, not raised
        out.append({"error": repr(e)})
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    results = []
    start = time.perf_counter()
    for _ in range(a.rounds):
        threads = [
            threading.Thread(target=one, args=(a.url, a.model, PROMPTS[i % len(PROMPTS)],
                                               a.max_tokens, results))
            for i in range(a.concurrency)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    wall = (max(r["end"] for r in ok) - start) if ok else float("nan")
    tokens = sum(r["tokens"] for r in ok)
    ttfts = [r["ttft"] for r in ok]
    print(json.dumps({
        "label": a.label,
        "concurrency": a.concurrency,
        "requests": len(results),
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "decode_tok_s": round(tokens / wall, 2) if ok else None,
        "ttft_mean_s": round(sum(ttfts) / len(ttfts), 3) if ttfts else None,
        "ttft_max_s": round(max(ttfts), 3) if ttfts else None,
        "errors": errors[:3],
    }))


if __name__ == "__main__":
    main()
