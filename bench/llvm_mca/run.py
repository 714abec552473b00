#!/usr/bin/env python3
"""Extract each kernel loop (ours and ggml's), run llvm-mca on it for each
core model and print the markdown table. Called by bench/llvm_mca.sh,
which builds the inputs; see that script for what is measured.

Usage: run.py WORKDIR OURS.s CALLEES.txt GGML_NEON.s GGML_DOT.s GGML_I8MM.s KQ_NEON.rs
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MCA = os.environ.get("LLVM_MCA", "llvm-mca-22")
# (column title, -mcpu). LLVM 22 has no Cortex-A78 model of its own (it
# maps cortex-a78 to the Cortex-A57 model, which does not know sdot or
# smmla well), so Neoverse N1 (Cortex-A76 based, the same two 128-bit
# ASIMD pipes as the A78) stands beside it; cortex-x3 maps to the
# Neoverse V2 model (same numbers as neoverse-v2).
CPUS = [
    ("A78 (A57 model)", "cortex-a78"),
    ("N1 (A78 proxy)", "neoverse-n1"),
    ("X3 (V2 model)", "cortex-x3"),
    ("V2", "neoverse-v2"),
]
# values per multiply-dot instruction and row pair: sdot 16, smmla 8 per
# row pair x 4 row pairs, widening byte multiply 8
PER_OP = {"sdot": 16, "smmla": 32, "smull": 8}

BLOCK32 = [  # our type name in the Rust paths, ggml's vec_dot suffix, ggml has i8mm
    ("Q4_0", "q4_0::Q4_0", "q4_0_q8_0", True),
    ("Q4_1", "q4_1::Q4_1", "q4_1_q8_1", True),
    ("Q5_0", "q5::Q5_0", "q5_0_q8_0", False),
    ("Q5_1", "q5::Q5_1", "q5_1_q8_1", False),
    ("Q8_0", "q8_0::Q8_0", "q8_0_q8_0", True),
    # IQ4_NL and MXFP4 share one table-lookup type (`iq4_nl::Lut<MX>`)
    ("IQ4_NL", "iq4_nl::Lut<false>", "iq4_nl_q8_0", False),
    ("MXFP4", "iq4_nl::Lut<true>", "mxfp4_q8_0", False),
]
KQUANT = [  # type, tile function in k_quants/neon.rs, filter, ggml suffix, ggml has i8mm
    ("Q2_K", "tile_q2k", [], "q2_K_q8_K", False),
    ("Q3_K", "tile_q3k", [], "q3_K_q8_K", False),
    # Q4_K and Q5_K share tile_q4k; Q5_K's loop is the longer (the 5th bit)
    ("Q4_K", "tile_q4k", ["--fewest"], "q4_K_q8_K", True),
    ("Q5_K", "tile_q4k", [], "q5_K_q8_K", False),
    ("Q6_K", "tile_q6k", [], "q6_K_q8_K", True),
    ("IQ4_XS", "tile_iq4xs", [], "iq4_xs_q8_K", False),
    # Q8_KS (the IQ2 types' kernel type) is tile_q6k with a byte load for
    # the 6-bit unpack: the shorter of tile_q6k's two loops
    ("Q8_KS", "tile_q6k", ["--fewest"], None, False),
    # TQ2_0's tile lives in k_quants/tq2.rs (dispatched from neon.rs)
    ("TQ2_0", "tile_tq2", [], "tq2_0_q8_K", False),
]
# Types imported into another type's blocks (`quant::import`): our loop is
# that type's tile (the rows above), ggml's is the type's own vec_dot.
REPACKED = [  # type, runs as (a KQUANT row), ggml suffix
    ("IQ2_XXS", "Q8_KS", "iq2_xxs_q8_K"),
    ("IQ2_XS", "Q8_KS", "iq2_xs_q8_K"),
    ("IQ2_S", "Q8_KS", "iq2_s_q8_K"),
    ("IQ3_XXS", "Q6_K", "iq3_xxs_q8_K"),
    ("IQ3_S", "Q6_K", "iq3_s_q8_K"),
    ("IQ1_S", "Q6_K", "iq1_s_q8_K"),
    ("IQ1_M", "Q6_K", "iq1_m_q8_K"),
    ("TQ1_0", "TQ2_0", "tq1_0_q8_K"),
]


def tile_ranges(path):
    """{tile_xxx: (first line, last line)} of the top-level functions of
    k_quants/neon.rs."""
    lines = open(path).read().splitlines()
    starts = [(i + 1, m.group(1)) for i, l in enumerate(lines)
              if (m := re.match(r"^(?:unsafe )?fn (\w+)", l))]
    out = {}
    for k, (ln, name) in enumerate(starts):
        end = starts[k + 1][0] - 1 if k + 1 < len(starts) else len(lines)
        out[name] = (ln, end)
    return out


class Runner:
    def __init__(self, work, callees):
        self.work, self.callees, self.n = work, callees, 0
        self.notes = []

    def measure(self, asm, func_rx, want, pairs, values, extra=(), callees=True):
        """Cycles per (block of `block` values x row pair) on each CPU, or
        None when the loop is not found. `pairs` row pairs x `values`
        values per row pair in one iteration."""
        self.n += 1
        out = os.path.join(self.work, f"loop{self.n:03d}.s")
        expect = pairs * values // PER_OP[want]
        cmd = [sys.executable, os.path.join(HERE, "loops.py"), "extract", asm, func_rx,
               "--want", want, "--expect", str(expect), "-o", out, *extra]
        if callees:
            cmd += ["--callees", self.callees]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            self.notes.append(f"not found: {func_rx} ({r.stderr.strip().splitlines()[-1:]})")
            return None
        info = json.loads(r.stdout)
        info["cycles"] = {}
        for _, cpu in CPUS:
            m = subprocess.run([MCA, "-mtriple=aarch64", f"-mcpu={cpu}",
                                "-mattr=+neon,+dotprod,+i8mm,+fullfp16", "-iterations=100", out],
                               capture_output=True, text=True)
            if m.returncode:
                sys.exit(f"llvm-mca failed on {out}: {m.stderr[-500:]}")
            total = int(re.search(r"Total Cycles:\s+(\d+)", m.stdout).group(1))
            info["cycles"][cpu] = total / 100
        info["pairs"], info["values"], info["file"] = pairs, values, out
        return info


def cell(ours, theirs, cpu, block):
    def per(x):
        return x["cycles"][cpu] / (x["pairs"] * x["values"] / block)
    if ours and theirs:
        a, b = per(ours), per(theirs)
        return f"{a:.2f} / {b:.2f} ({a / b:.2f})"
    if ours:
        return f"{per(ours):.2f} / -"
    if theirs:
        return f"- / {per(theirs):.2f}"
    return "-"


def shape(x):
    if not x:
        return "-"
    t = f" t={x['trips']}" if x.get("trips", 1) not in (1, None) else ""
    return f"{x['pairs']}x{x['values']}, {x['insns']} insns{t}"


def main():
    work, ours_s, callees, g_neon, g_dot, g_i8mm, kq_rs = sys.argv[1:8]
    R = Runner(work, callees)
    rows = []
    b32 = "cpu::qlinear::block32::neon::"
    for name, path, gsfx, g_mm in BLOCK32:
        g = f"^ggml_vec_dot_{gsfx}$"
        # The decode tiles (R x C <= 2) take two blocks per iteration.
        rows.append((name, "dotprod decode 2x1", 32,
                     R.measure(ours_s, rf"{b32}tile_dot::<.*{path}, 2, 1>$", "sdot", 2, 64),
                     R.measure(g_dot, g, "sdot", 1, 64, callees=False)))
        rows.append((name, "dotprod prefill 4x4", 32,
                     R.measure(ours_s, rf"{b32}tile_dot::<.*{path}, 4, 4>$", "sdot", 16, 32),
                     None))
        rows.append((name, "i8mm prefill 2x2", 32,
                     R.measure(ours_s, rf"{b32}tile_mm::<.*{path}>$", "smmla", 4, 32),
                     R.measure(g_i8mm, g, "smmla", 4, 32, callees=False) if g_mm else None))
        rows.append((name, "NEON decode 2x1", 32,
                     R.measure(ours_s, rf"{b32}tile_neon::<.*{path}, 2, 1>$", "smull", 2, 64),
                     R.measure(g_neon, g, "smull", 1, 64, callees=False)))
        rows.append((name, "NEON prefill 4x2", 32,
                     R.measure(ours_s, rf"{b32}tile_neon::<.*{path}, 4, 2>$", "smull", 8, 32),
                     None))
    ranges = tile_ranges(kq_rs)
    kq = "cpu::qlinear::k_quants::neon::"
    kq_mm = "cpu::qlinear::k_quants::neon_mm::"
    decode = {}  # type -> our (dotprod, NEON) decode loops, for REPACKED
    for name, tile, filt, gsfx, g_mm in KQUANT:
        if tile == "tile_tq2":
            src = ["--src", "k_quants/tq2.rs:1-100000"]
        else:
            others = [ranges[t] for t in ("tile_q4k", "tile_q6k", "tile_iq4xs", "tile_q2k", "tile_q3k")
                      if t != tile]
            src = ["--src", "k_quants/neon.rs:" + ",".join(f"{a}-{b}" for a, b in [ranges[tile], *others])]
        extra = src + filt
        g = f"^ggml_vec_dot_{gsfx}$"
        decode[name] = (R.measure(ours_s, rf"{kq}tile_dot::<1, 1>$", "sdot", 1, 256, extra),
                        R.measure(ours_s, rf"{kq}tile_neon::<1, 1>$", "smull", 1, 256, extra))
        rows.append((name, "dotprod decode 1x1", 256, decode[name][0],
                     R.measure(g_dot, g, "sdot", 1, 256, callees=False) if gsfx else None))
        rows.append((name, "dotprod prefill 4x2", 256,
                     R.measure(ours_s, rf"{kq}tile_dot::<4, 2>$", "sdot", 8, 256, extra), None))
        # Our i8mm tiles (k_quants/neon_mm.rs): Q4_K, Q5_K and Q6_K.
        mm = {"Q4_K": "tile_mm::<false>", "Q5_K": "tile_mm::<true>",
              "Q6_K": "tile_mm_q6k"}.get(name)
        if g_mm or mm:
            ours_mm = (R.measure(ours_s, rf"{kq_mm}{mm}$", "smmla", 4, 256)
                       if mm else None)
            rows.append((name, "i8mm prefill 2x2" if mm else "i8mm prefill 2x2 (ggml only)",
                         256, ours_mm,
                         R.measure(g_i8mm, g, "smmla", 4, 256, callees=False) if g_mm else None))
        rows.append((name, "NEON decode 1x1", 256, decode[name][1],
                     R.measure(g_neon, g, "smull", 1, 256, callees=False) if gsfx else None))
        rows.append((name, "NEON prefill 4x2", 256,
                     R.measure(ours_s, rf"{kq}tile_neon::<4, 2>$", "smull", 8, 256, extra), None))
    # ggml's own loops for the imported types beside the tile they run on
    # (ggml has no i8mm loop for them; its IQ loops look their grids up).
    for name, runs_as, gsfx in REPACKED:
        g = f"^ggml_vec_dot_{gsfx}$"
        rows.append((name, f"dotprod decode 1x1 (as {runs_as})", 256, decode[runs_as][0],
                     R.measure(g_dot, g, "sdot", 1, 256, callees=False)))
        rows.append((name, f"NEON decode 1x1 (as {runs_as})", 256, decode[runs_as][1],
                     R.measure(g_neon, g, "smull", 1, 256, callees=False)))

    head = ["type", "loop", "block", "ours: pairs x values/iter", "ggml: pairs x values/iter"]
    head += [f"{t}: ours / ggml (ratio)" for t, _ in CPUS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, loop, block, ours, theirs in rows:
        cells = [name, loop, str(block), shape(ours), shape(theirs)]
        cells += [cell(ours, theirs, cpu, block) for _, cpu in CPUS]
        print("| " + " | ".join(cells) + " |")
    print()
    print("Cells: llvm-mca cycles per weight block per (weight row x activation row),"
          " i.e. Total Cycles / 100 iterations / (row pairs x blocks per iteration);"
          " ratio > 1: ours slower. `t=N`: an outer loop whose inner loop (not unrolled)"
          " was replayed N times.")
    # the raw JSON, for whoever wants to dig
    with open(os.path.join(work, "loops.json"), "w") as f:
        json.dump([{"type": n, "loop": l, "ours": o, "ggml": t} for n, l, _, o, t in rows], f, indent=1)
    for n in R.notes:
        print(f"- {n}", file=sys.stderr)


if __name__ == "__main__":
    main()
