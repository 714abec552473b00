#!/usr/bin/env python3
"""Prints bench/compare.sh's ratio table from its runs.tsv manifest.

Each manifest line: name, engine (llama.cpp | mllm), threads, the engine's
JSON output (llama-bench -o json | mllm bench --json), the /usr/bin/time -v
log of that process. Rows pair the two engines' results for the same file,
threads and test; ratio = mllm tok/s / llama.cpp tok/s (above 1: mllm is
faster). Peak RSS is per process (a process runs all tests of its line):
llama.cpp's from GNU time, mllm's from its own JSON (peak_rss_bytes).
"""
import json
import os
import re
import sys


def test_name(n_prompt, n_gen, n_depth):
    """The test label both engines use: pp512, tg128, tg64 @ d4096."""
    name = f"pp{n_prompt}" if n_prompt and not n_gen else f"tg{n_gen}"
    if n_prompt and n_gen:  # llama-bench's combined pp+tg test
        name = f"pp{n_prompt}+tg{n_gen}"
    return f"{name} @ d{n_depth}" if n_depth else name


def max_rss_kib(time_log):
    with open(time_log) as f:
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", f.read())
    if not m:
        sys.exit(f"table.py: no 'Maximum resident set size' in {time_log}")
    return int(m.group(1))


def cpu_seconds(time_log):
    """User + system CPU seconds of a process, from its GNU time log."""
    with open(time_log) as f:
        text = f.read()
    return sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", text).group(1))
               for k in ("User", "System"))


def others_line(manifest):
    """How many cores other processes kept busy while the benchmarks ran:
    the machine's busy time (cpu.txt, from /proc/stat) less the benchmarks'."""
    with open(os.path.join(os.path.dirname(manifest), "cpu.txt")) as f:
        start, end = (line.split() for line in f)
    hz, ncpu = int(start[3]), int(start[4])
    busy = (int(end[1]) - int(start[1])) / hz
    wall = float(end[2]) - float(start[2])
    with open(manifest) as f:
        ours = sum(cpu_seconds(line.rstrip("\n").split("\t")[4]) for line in f)
    others = max(busy - ours, 0.0) / wall
    warn = "  WARNING: the machine was busy; ratios are noisy" if others > 0.25 else ""
    return f"other processes kept {others:.2f} of {ncpu} cores busy during the runs ({wall:.0f} s){warn}"


def load(engine, path, time_log):
    """-> ({test: (avg, stddev)}, peak RSS MiB)."""
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            sys.exit(f"table.py: {path} is not JSON ({e})")
    if engine == "llama.cpp":
        tests = {
            test_name(r["n_prompt"], r["n_gen"], r.get("n_depth", 0)): (r["avg_ts"], r["stddev_ts"])
            for r in data
        }
        rss = max_rss_kib(time_log) / 1024
    else:
        tests = {r["test"]: (r["avg_ts"], r["stddev_ts"]) for r in data["results"]}
        rss = data["peak_rss_bytes"] / 2**20
    return tests, rss


def main():
    runs = {}  # (name, threads) in order -> {engine: (tests, rss)}
    with open(sys.argv[1]) as f:
        for line in f:
            name, engine, threads, path, time_log = line.rstrip("\n").split("\t")
            # one key per process pair: the path less its ".llama.json"/".mllm.json"
            runs.setdefault((name, threads, path.rsplit(".", 2)[0]), {})[engine] = load(engine, path, time_log)

    head = ["file", "test", "threads", "llama.cpp tok/s", "mllm tok/s", "ratio",
            "llama.cpp RSS MiB", "mllm RSS MiB"]
    rows = []
    for (name, threads, _), eng in runs.items():
        if set(eng) != {"llama.cpp", "mllm"}:
            sys.exit(f"table.py: {name} t={threads}: only {sorted(eng)} ran")
        (lt, lrss), (mt, mrss) = eng["llama.cpp"], eng["mllm"]
        for test in list(lt) + [t for t in mt if t not in lt]:
            l, m = lt.get(test), mt.get(test)
            fmt = lambda r: f"{r[0]:.2f} ± {r[1]:.2f}" if r else "missing"
            ratio = f"{m[0] / l[0]:.2f}" if l and m and l[0] else "-"
            rows.append([name, test, threads, fmt(l), fmt(m), ratio, f"{lrss:.0f}", f"{mrss:.0f}"])

    if rows:
        print_table(head, rows, {2, 3, 4, 5, 6, 7})
    print("\nratio = mllm / llama.cpp (above 1: mllm faster); tok/s = mean ± stddev over repetitions")
    print(others_line(sys.argv[1]))
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        vision_table(sys.argv[2])
    missing = [r for r in rows if "missing" in (r[3], r[4])]
    if missing:
        sys.exit(f"table.py: {len(missing)} test(s) ran in only one engine (see 'missing')")


def print_table(head, rows, right):
    """A Markdown table; columns in `right` are right-aligned."""
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    cell = lambda i, v: str(v).rjust(widths[i]) if i in right else str(v).ljust(widths[i])
    print("| " + " | ".join(cell(i, h) for i, h in enumerate(head)) + " |")
    print("|" + "|".join(("-" * (w + 1) + ":") if i in right else "-" * (w + 2)
                         for i, w in enumerate(widths)) + "|")
    for r in rows:
        print("| " + " | ".join(cell(i, v) for i, v in enumerate(r)) + " |")


def vision_table(path):
    """bench/vision.sh's lines: size, threads, llama.cpp ms, mllm ms."""
    rows = []
    with open(path) as f:
        for line in f:
            size, threads, lms, mms = line.split()
            ratio = f"{int(lms) / int(mms):.2f}" if int(mms) else "-"
            rows.append([f"Qwen3-VL-2B q8_0 image {size}x{size}", threads,
                         f"{int(lms) / 1000:.2f}", f"{int(mms) / 1000:.2f}", ratio])
    if rows:
        print("\nImage encoder (llama-mtmd-cli's 'encoding done' vs mllm bench --image-size):\n")
        print_table(["model", "threads", "llama.cpp s", "mllm s", "ratio"], rows, {1, 2, 3, 4})
        print("\nratio = llama.cpp time / mllm time (above 1: mllm faster)")


if __name__ == "__main__":
    main()
