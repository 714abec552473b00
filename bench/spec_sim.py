#!/usr/bin/env python3
"""How far prompt lookup (`--spec-type ngram`) can go on a model's own
greedy answers, by simulation (issue #27).

For each quoting prompt of bench/spec_prompts, the greedy answer's token ids
come from `mllm exec` (the prompt rendered through the chat template); the
speculative loop is then replayed in Python over those ids with a cost model
of the target's steps: a step of r rows costs BASE + ROW * (r - 1) ms (the
defaults were read off SmolLM2-135M-Instruct Q4_1 at 2 threads on an AMD
EPYC: 1 row 4.8 ms, each further row ~1.05 ms; give yours with --base-ms
and --row-ms). Printed per prompt, as decode speed-up over plain decoding
and tokens per step:

  ngram        what `NgramLookup` + `next_budget` do (checked against
               `mllm bench --spec-type ngram`: within a few percent)
  best of candidates
               the same lookups (suffixes of 4 down to 1 token), each step
               taking whichever occurrence the answer then follows longest:
               the most any choice among lookup's candidates gives
  free rows    ngram with verification rows that cost nothing beyond the
               first: what faster small-batch kernels could give at most
  oracle       the longest run of the answer found anywhere in the
               conversation, proposed exactly (no wasted rows): a bound for
               any proposer that copies from the conversation

    python3 bench/spec_sim.py [--model GGUF] [--tokens 96] [--base-ms 4.8] [--row-ms 1.05]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mllm(binary, *args):
    out = subprocess.run([binary, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"spec_sim: mllm {args[0]} failed:\n{out.stderr}")
    return out.stdout


def ids_of(text):
    return [int(x) for x in text.strip().split(",") if x.strip()]


def answer(binary, model, prompt_file, tokens, threads):
    """The prompt's ids (chat template applied) and the greedy answer's."""
    with open(prompt_file) as f:
        msgs = [{"role": "user", "content": f.read()}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(msgs, f)
        path = f.name
    try:
        rendered = mllm(binary, "template", "-m", model, "--messages", path)
    finally:
        os.unlink(path)
    prompt = ids_of(mllm(binary, "tokenize", "-m", model, "--text", rendered))
    out = mllm(binary, "exec", "-m", model, "--input-ids", ",".join(map(str, prompt)),
               "--max-new-tokens", str(tokens), "-t", str(threads), "--compiled", "--kv-type", "f16")
    return prompt, ids_of(out.strip().splitlines()[-1])


def continuation(h, s, mx):
    """What follows position s of h, copied on past its end (as LZ77)."""
    out = []
    for j in range(mx):
        at = s + j
        out.append(h[at] if at < len(h) else out[at - len(h)])
    return out


def lookup(h, mx, max_n=4, min_n=2):
    """`NgramLookup::lookup`: the latest occurrence of the longest suffix."""
    for n in range(max_n, min_n - 1, -1):
        if len(h) <= n:
            continue
        key = h[-n:]
        for s in range(len(h) - n - 1, -1, -1):
            if h[s:s + n] == key:
                return continuation(h, s + n, mx)
    return []


def candidates(h, mx):
    out = []
    for n in range(4, 0, -1):
        if len(h) <= n:
            continue
        key = h[-n:]
        out += [continuation(h, s + n, mx) for s in range(len(h) - n) if h[s:s + n] == key]
    return out


def replay(prompt, ans, propose, cost, draft_max=16):
    """The loop of `speculative::decode_loop` with `next_budget`: seconds
    (model units) and target steps for the whole answer."""
    pos, t, steps, budget = 0, 0.0, 0, draft_max
    while pos < len(ans):
        hist = prompt + ans[:pos + 1]
        rest = ans[pos + 1:]
        mx = min(budget, len(rest))
        p = propose(hist, mx, rest)[:mx] if mx > 0 else []
        acc = 0
        while acc < len(p) and p[acc] == rest[acc]:
            acc += 1
        t += cost(1 + len(p))
        steps += 1
        if p:
            budget = min(budget * 2, draft_max) if acc == len(p) else acc + 1
        pos += acc + 1
    return t, steps


def oracle(prompt, ans, cost, most=16):
    pos, t, steps = 0, 0.0, 0
    while pos < len(ans):
        hist = prompt + ans[:pos + 1]
        rest = ans[pos + 1:pos + 1 + most]
        best = 0
        for s in range(len(hist)):
            k = 0
            while k < len(rest) and s + k < len(hist) and hist[s + k] == rest[k]:
                k += 1
            best = max(best, k)
        t += cost(1 + best)
        steps += 1
        pos += best + 1
    return t, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, ".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--mllm", default=os.path.join(ROOT, "target/release/mllm"))
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-ms", type=float, default=4.8)
    ap.add_argument("--row-ms", type=float, default=1.05)
    ap.add_argument("prompts", nargs="*", default=["rewrite", "type_hints", "extract"])
    a = ap.parse_args()

    def cost(rows):
        return a.base_ms + a.row_ms * (rows - 1)

    def free(rows):
        return a.base_ms

    print(f"model {os.path.basename(a.model)}, {a.tokens} greedy tokens, "
          f"a step of r rows {a.base_ms} + {a.row_ms} * (r - 1) ms")
    print("| prompt | ngram | best of candidates | free rows | oracle |")
    print("|---|---:|---:|---:|---:|")
    for name in a.prompts:
        prompt, ans = answer(a.mllm, a.model, os.path.join(ROOT, "bench/spec_prompts", name + ".txt"),
                             a.tokens, a.threads)
        plain = a.base_ms * len(ans)

        def best(h, mx, rest):
            def run(c):
                k = 0
                while k < len(c) and k < len(rest) and c[k] == rest[k]:
                    k += 1
                return k
            return max(candidates(h, mx), key=run, default=[])

        cells = []
        for t, steps in [
            replay(prompt, ans, lambda h, mx, _r: lookup(h, mx), cost),
            replay(prompt, ans, best, cost),
            replay(prompt, ans, lambda h, mx, _r: lookup(h, mx), free),
            oracle(prompt, ans, cost),
        ]:
            cells.append(f"{plain / t:.2f}x ({len(ans) / steps:.2f}/step)")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
