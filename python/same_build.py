"""Checks that the Python module's build can reuse what `cargo test
--workspace` compiled.

python/ is its own Cargo workspace, so Cargo resolves its features and
versions on its own; any crate both builds share but resolve differently (a
feature more or less, another version) is compiled twice, and so is every
crate above it: about six minutes of CI. This compares the two resolutions
with `cargo tree` and names each difference with the line that fixes it.
Exit status 1 when they differ.
"""

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^(\S+) v(\S+)(?: \(([^)]*)\))? \[(.*)\]")


def units(manifest):
    """{name: {(version, features)}}: each way the build compiles a crate."""
    out = subprocess.run(
        ["cargo", "tree", "--manifest-path", str(manifest), "--workspace",
         "-e", "normal,build,dev", "--prefix", "none", "-f", "{p} [{f}]"],
        check=True, capture_output=True, text=True, cwd=ROOT).stdout
    found = defaultdict(set)
    for line in out.splitlines():
        m = LINE.match(line.replace(" (*)", "").replace(" (proc-macro)", ""))
        if m:
            found[m[1]].add((m[2], m[4]))
    return found


def main():
    main_ws = units(ROOT / "Cargo.toml")
    python_ws = units(ROOT / "python" / "Cargo.toml")
    problems = []
    for name, builds in sorted(python_ws.items()):
        if name not in main_ws:
            continue  # pyo3 and the module itself: only this build has them
        for version, features in sorted(builds - main_ws[name]):
            versions = sorted({v for v, _ in main_ws[name]})
            if version not in versions:
                problems.append(
                    f"{name} {version} here, {', '.join(versions)} in the main "
                    f"workspace: cargo update --manifest-path python/Cargo.toml "
                    f"-p {name}@{version} --precise {versions[-1]}")
            else:
                wanted = " or ".join(
                    f"[{f}]" for v, f in sorted(main_ws[name]) if v == version)
                problems.append(
                    f"{name} {version} with [{features}] here, {wanted} in the "
                    f"main workspace: mirror its features in python/Cargo.toml "
                    f"(or, when this build has more, in tests/Cargo.toml)")
    if problems:
        print("python/ resolves these crates unlike `cargo test --workspace`, "
              "so its build would compile them (and all above them) again:",
              file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print("python/ shares every crate build with `cargo test --workspace`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
