#!/usr/bin/env python3
"""Find the hot loop of one function in an AArch64 assembly file (rustc's
`--emit asm`, clang's `-S`) and write its hot path out as a straight-line
block for llvm-mca.

How:
- the function is cut into basic blocks; loops are natural loops (a back
  edge u -> h where h dominates u), merged per header;
- a loop's hot path is the shortest path (in instructions) from its header
  back to it. In the Rust kernels the branches inside the per-block loop
  are the f16 -> f32 conversion: `half` checks the run-time fp16 flag and
  either calls its `fcvt` helper (the path of every core modelled here,
  all have FEAT_FP16) or runs a branchy software conversion (with early
  outs for 0, inf/NaN and subnormals). So a block that calls a known small
  helper weighs 0 (the fcvt path wins), other blocks their instruction
  count, and a call to anything else 1000 more;
- calls on the path are inlined from `--callees` (llvm-objdump -d output
  of the dependency rlibs) when the callee is a small straight-line
  function (the `half` helper: fmov, fcvt, ret): the `bl` and `ret` are
  dropped (llvm-mca would charge a call 100 cycles of latency), so the
  call's own cost (two taken branches) is not counted;
- branch targets are rewritten to one label (llvm-mca does not follow
  branches; it replays the block as if every branch fell through).

Usage:
  loops.py list    FILE.s FUNC_REGEX [--callees OBJDUMP.txt]
  loops.py extract FILE.s FUNC_REGEX [--callees OBJDUMP.txt] --want OP
           --expect N [--src FILE:FROM-TO,...] [--has OP] [--lacks OP] [--fewest] -o OUT.s

FUNC_REGEX matches the demangled name (llvm-cxxfilt-22) and must match
one function. `extract` takes the loop whose hot path has exactly N
multiply-dot instructions of kind OP (sdot, smmla, or smull for the
smull/smull2/smlal/smlal2 of plain NEON): N fixes how many values and
rows one iteration covers. It is an innermost loop, or an outer loop whose
inner loops (not unrolled by the compiler) run t times, t found so that
the count is N. --src keeps loops with more instructions from the first line
range of FILE than from each other one (to tell apart the inlined tile
functions of a match over kinds); --has and
--lacks keep loops with / without an instruction. Of several loops that
pass, the one with the most instructions wins (--fewest: the fewest).
Prints one line of JSON.
"""
import heapq
import json
import re
import subprocess
import sys
from collections import Counter

COND = re.compile(r"^(b\.\w+|cbn?z|tbn?z)\s")
UNCOND = re.compile(r"^b\s")
END = re.compile(r"^(ret|br|brk|udf)\b")
LABEL = re.compile(r"^([.\w$]+):")
UNKNOWN_CALL = 1000
MUL_OPS = ("sdot", "udot", "smmla", "smull", "smull2", "smlal", "smlal2")


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(
        ["llvm-cxxfilt-22"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return dict(zip(names, out))


FILES = {}


def parse(path):
    """-> [(mangled name, [lines])] of the functions in an .s file; fills
    FILES {number: path} from the .file directives."""
    funcs, cur = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r'\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?', line)
            if m:
                FILES[int(m.group(1))] = m.group(3) or m.group(2)
                continue
            m = LABEL.match(line)
            if m and not line.startswith((".L", "$")):
                cur = (m.group(1), [])
                funcs.append(cur)
                continue
            if cur is not None:
                if line.startswith(".Lfunc_end"):
                    cur = None
                else:
                    cur[1].append(line)
    return funcs


def callees_from_objdump(path):
    """{symbol: [insns]} from `llvm-objdump -d --no-show-raw-insn
    --no-leading-addr` output."""
    out, cur = {}, None
    if not path:
        return out
    with open(path) as f:
        for line in f:
            m = re.match(r"^<(.+)>:$", line.strip())
            if m:
                cur = out.setdefault(m.group(1), [])
                continue
            s = line.strip()
            if cur is not None and s and not s.startswith(("Disassembly", "...")) and ":" not in s:
                cur.append(re.sub(r"\s+", " ", s.split("//")[0]).strip())
    return out


def blocks_of(lines):
    """Basic blocks: [{'labels': [...], 'insns': [...]}]. Each instruction
    carries its source position as a suffix `@@FILE:LINE` (from `.loc`),
    stripped before llvm-mca."""
    blocks = [{"labels": [], "insns": []}]
    loc = "?:0"
    for raw in lines:
        line = raw.split("//")[0].rstrip()
        if not line.strip():
            continue
        m = LABEL.match(line)
        if m:
            if blocks[-1]["insns"]:
                blocks.append({"labels": [], "insns": []})
            blocks[-1]["labels"].append(m.group(1))
            continue
        s = line.strip()
        if s.startswith(".loc"):
            f = s.split()
            loc = f"{f[1]}:{f[2]}"
            continue
        if s.startswith("."):
            continue  # other directives
        s = re.sub(r"\s+", " ", s)
        blocks[-1]["insns"].append(s + " @@" + loc)
        if COND.match(s) or UNCOND.match(s) or END.match(s):
            blocks.append({"labels": [], "insns": []})
    blocks = [b for b in blocks if b["insns"] or b["labels"]]
    where = {lab: i for i, b in enumerate(blocks) for lab in b["labels"]}
    for i, b in enumerate(blocks):
        last = strip(b["insns"][-1]) if b["insns"] else ""
        succ = []
        tgt = last.split(",")[-1].split()[-1] if last else ""
        if COND.match(last):
            succ = [where[tgt]] if tgt in where else []
            if i + 1 < len(blocks):
                succ.append(i + 1)
        elif UNCOND.match(last):
            succ = [where[tgt]] if tgt in where else []
        elif END.match(last):
            succ = []
        elif i + 1 < len(blocks):
            succ = [i + 1]
        b["succ"] = succ
    return blocks


def dominators(blocks):
    n = len(blocks)
    preds = [[] for _ in range(n)]
    for i, b in enumerate(blocks):
        for s in b["succ"]:
            preds[s].append(i)
    # reachable set and reverse postorder
    order, seen, stack = [], {0}, [(0, iter(blocks[0]["succ"]))]
    while stack:
        node, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            order.append(node)
            stack.pop()
        elif nxt not in seen:
            seen.add(nxt)
            stack.append((nxt, iter(blocks[nxt]["succ"])))
    rpo = order[::-1]
    idx = {b: k for k, b in enumerate(rpo)}
    idom = {0: 0}

    def intersect(a, b):
        while a != b:
            while idx[a] > idx[b]:
                a = idom[a]
            while idx[b] > idx[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            ps = [p for p in preds[b] if p in idom]
            if not ps:
                continue
            new = ps[0]
            for p in ps[1:]:
                new = intersect(p, new)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return idom, preds


def dominates(idom, a, b):
    while True:
        if a == b:
            return True
        if b == 0 or b not in idom:
            return False
        b = idom[b]


def natural_loops(blocks):
    idom, preds = dominators(blocks)
    loops = {}
    for u, b in enumerate(blocks):
        if u not in idom:
            continue
        for h in b["succ"]:
            if dominates(idom, h, u):
                body = loops.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(p for p in preds[x] if p in idom)
    return loops


def cost(insns, callees):
    """Path weight of a block: its instruction count, 0 for a block that
    calls a known small helper (the fp16 `fcvt` path is the one to take),
    UNKNOWN_CALL more for a call to anything else."""
    c = len(insns)
    for s in map(strip, insns):
        if s.startswith("bl "):
            body = callees.get(s.split()[1])
            if body and len(body) <= 16:
                return 0
            c += UNKNOWN_CALL
    return c


def hot_path(blocks, h, body, callees):
    """Shortest cycle h -> ... -> h inside body, as a list of block ids."""
    w = {i: cost(blocks[i]["insns"], callees) for i in body}
    dist, prev = {h: w[h]}, {}
    heap = [(w[h], h)]
    best, last = None, None
    while heap:
        d, x = heapq.heappop(heap)
        if d > dist.get(x, 1 << 60):
            continue
        for s in blocks[x]["succ"]:
            if s == h:
                if best is None or d < best:
                    best, last = d, x
            elif s in body:
                nd = d + w[s]
                if nd < dist.get(s, 1 << 60):
                    dist[s], prev[s] = nd, x
                    heapq.heappush(heap, (nd, s))
    path, x = [], last
    while x is not None:
        path.append(x)
        x = prev.get(x) if x != h else None
    return path[::-1], best


def path_insns(blocks, path, callees):
    out, inlined = [], 0
    for i in path:
        for s in blocks[i]["insns"]:
            if strip(s).startswith("bl "):
                body = callees.get(strip(s).split()[1])
                if body and len(body) <= 16:
                    # llvm-mca gives a call 100 cycles of latency: put the
                    # callee's body in its place, without `bl` and `ret`
                    out += [x for x in body if x != "ret"]
                    inlined += 1
                    continue
            out.append(s)
    return out, inlined


def strip(s):
    return s.split(" @@")[0]


def src_counts(insns, files, fsuffix, ranges):
    """How many of the instructions come from each line range of the file
    ending in `fsuffix`."""
    n = [0] * len(ranges)
    for s in insns:
        if " @@" not in s:
            continue
        f, l = s.split(" @@")[1].split(":")
        if files.get(int(f) if f.isdigit() else -1, "").endswith(fsuffix):
            for k, (lo, hi) in enumerate(ranges):
                n[k] += lo <= int(l) <= hi
    return n


def for_mca(insns):
    lines = [".Lmca_top:"]
    for s in map(strip, insns):
        if COND.match(s) or UNCOND.match(s) or s.startswith("bl "):
            tgt = s.split(",")[-1].split()[-1]
            s = s[: s.rfind(tgt)] + ".Lmca_top"
        lines.append("\t" + s)
    return "\n".join(lines) + "\n"



def collapsed_path(blocks, h, body, inner, callees, trips):
    """Hot path of loop (h, body) whose maximal inner loops `inner`
    ({header: body}) each run `trips` times: Dijkstra over the outer
    blocks and one node per inner loop. -> (insns, inlined) or None."""
    owner = {b: ih for ih, ib in inner.items() for b in ib}
    inner_path = {ih: hot_path(blocks, ih, ib, callees) for ih, ib in inner.items()}

    def node(b):
        return ("L", owner[b]) if b in owner else ("B", b)

    def weight(n):
        if n[0] == "B":
            return cost(blocks[n[1]]["insns"], callees)
        return trips * inner_path[n[1]][1]

    def succs(n):
        if n[0] == "B":
            return [node(s) for s in blocks[n[1]]["succ"] if s in body]
        ih = n[1]
        out = []
        for b in inner_path[ih][0]:  # exits from the inner loop's hot path
            out += [node(s) for s in blocks[b]["succ"] if s in body and s not in inner[ih]]
        return out

    start = node(h)
    dist, prev, heap = {start: weight(start)}, {}, [(weight(start), 0, start)]
    best, last, tie = None, None, 1
    while heap:
        d, _, x = heapq.heappop(heap)
        if d > dist.get(x, 1 << 60):
            continue
        for s in succs(x):
            if s == start:
                if best is None or d < best:
                    best, last = d, x
            else:
                nd = d + weight(s)
                if nd < dist.get(s, 1 << 60):
                    dist[s], prev[s] = nd, x
                    tie += 1
                    heapq.heappush(heap, (nd, tie, s))
    if last is None:
        return None
    seq, x = [], last
    while x is not None:
        seq.append(x)
        x = prev.get(x) if x != start else None
    insns, inlined = [], 0
    for n in seq[::-1]:
        if n[0] == "B":
            i, k = path_insns(blocks, [n[1]], callees)
            insns += i
            inlined += k
        else:
            i, k = path_insns(blocks, inner_path[n[1]][0], callees)
            insns += i * trips
            inlined += k * trips
    return insns, inlined


def muls(insns, want):
    """Count of the multiply-dots of kind `want`; for "smull", the widening
    byte multiplies (smull/smull2/smlal/smlal2 into .8h, 8 products each),
    not the 16-bit ones of the scale and min sums."""
    ops = Counter(strip(s).split()[0] for s in insns)
    if want != "smull":
        return ops[want], ops
    n = sum(1 for s in map(strip, insns)
            if s.split()[0] in ("smull", "smull2", "smlal", "smlal2") and ".8h" in s.split(",")[0])
    return n, ops


def analyse(path, rx, callees):
    funcs = parse(path)
    names = demangle([f for f, _ in funcs])
    sel = [(names[f], body) for f, body in funcs if re.search(rx, names[f])]
    if len(sel) != 1:
        sys.exit(f"{len(sel)} functions match {rx!r}: " + "; ".join(n for n, _ in sel[:4]))
    name, lines = sel[0]
    blocks = blocks_of(lines)
    return name, blocks, natural_loops(blocks)


def direct_inner(loops, h):
    body = loops[h]
    inner = {h2: b2 for h2, b2 in loops.items() if h2 != h and h2 in body}
    return {h2: b2 for h2, b2 in inner.items()
            if not any(h3 != h2 and h2 in b3 for h3, b3 in inner.items())}


def choose(blocks, loops, callees, want, expect, filt=lambda insns: True, fewest=False):
    """The loop doing `expect` multiply-dots of kind `want` per iteration:
    an innermost loop, else an outer loop whose inner loops run t times.
    -> (header, trips, insns, inlined) or the innermost loop with the most
    multiply-dots (trips None) when nothing matches."""
    fallback, found = None, []
    for h in sorted(loops):
        inner = direct_inner(loops, h)
        if not inner:
            p, _ = hot_path(blocks, h, loops[h], callees)
            insns, inlined = path_insns(blocks, p, callees)
            m, _ = muls(insns, want)
            if m == expect and filt(insns):
                found.append((h, 1, insns, inlined))
            if fallback is None or m > fallback[0]:
                fallback = (m, h, insns, inlined)
    for h in sorted(loops):
        inner = direct_inner(loops, h)
        if not inner or any(direct_inner(loops, ih) for ih in inner):
            continue
        for t in range(2, 17):
            r = collapsed_path(blocks, h, loops[h], inner, callees, t)
            if r and muls(r[0], want)[0] == expect and filt(r[0]):
                found.append((h, t, r[0], r[1]))
                break
    if found:
        pick = min if fewest else max
        return pick(found, key=lambda f: len(f[2]))
    m, h, insns, inlined = fallback
    return h, None, insns, inlined


def main(argv):
    mode, path, rx = argv[0], argv[1], argv[2]
    rest, callees, out, want, expect = argv[3:], {}, None, "sdot", 0
    src, has, lacks, fewest = None, [], [], False
    while rest:
        o = rest.pop(0)
        if o == "--callees":
            callees = callees_from_objdump(rest.pop(0))
        elif o == "-o":
            out = rest.pop(0)
        elif o == "--want":
            want = rest.pop(0)
        elif o == "--expect":
            expect = int(rest.pop(0))
        elif o == "--src":  # FILE:FROM-TO[,FROM-TO...]: the first range wins
            f, r = rest.pop(0).rsplit(":", 1)
            src = (f, [tuple(map(int, x.split("-"))) for x in r.split(",")])
        elif o == "--fewest":  # of several matching loops, the shortest
            fewest = True
        elif o == "--has":
            has.append(rest.pop(0))
        elif o == "--lacks":
            lacks.append(rest.pop(0))
        else:
            sys.exit(f"unknown option {o}")
    name, blocks, loops = analyse(path, rx, callees)
    if mode == "list":
        print(name)
        for h in sorted(loops):
            p, _ = hot_path(blocks, h, loops[h], callees)
            insns, _ = path_insns(blocks, p, callees)
            _, ops = muls(insns, want)
            mul = {k: ops[k] for k in MUL_OPS if ops[k]}
            print(f"  header {h}: blocks {len(loops[h])} inner {sorted(direct_inner(loops, h))} "
                  f"path {len(p)} blocks / {len(insns)} insns {mul}")
        return
    def filt(insns):
        ops = Counter(strip(s).split()[0] for s in insns)
        n = src_counts(insns, FILES, *src) if src else [1]
        return (n[0] > 0 and all(n[0] > x for x in n[1:])
                and all(ops[o] for o in has) and not any(ops[o] for o in lacks))

    h, trips, insns, inlined = choose(blocks, loops, callees, want, expect, filt, fewest)
    with open(out, "w") as f:
        f.write(for_mca(insns))
    m, ops = muls(insns, want)
    if trips is None:
        sys.exit(f"no loop in {name} with {expect} {want} and the filters")
    print(json.dumps({"func": name, "header": h, "trips": trips, "insns": len(insns),
                      "loop_blocks": len(loops[h]), "muls": m, "inlined_calls": inlined,
                      "calls": sum(1 for s in insns if s.startswith("bl "))}))


if __name__ == "__main__":
    main(sys.argv[1:])
