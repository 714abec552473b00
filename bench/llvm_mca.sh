#!/usr/bin/env bash
# llvm-mca cycles of the quantized matmul inner loops on Arm cores, ours
# beside ggml's (issue #26 item 5).
#
# What it measures: for each weight type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
# IQ4_NL; Q2_K..Q6_K, IQ4_XS) and each kernel flavour (plain NEON, dotprod,
# i8mm; decode and prefill tiles), the loop that processes one weight block
# (or a few) in our release aarch64 build, and ggml's `ggml_vec_dot_*`
# loop for the same type from the llama.cpp vendored in the
# llama-cpp-python sdist, compiled by clang with the same LLVM (22) as
# rustc-web. Each loop's hot path goes to llvm-mca (-iterations=100), and
# Total Cycles / 100 is divided by the (weight row x activation row) pairs
# and blocks one iteration covers: cycles per block per row pair.
#
# Loops are found in the assembly by bench/llvm_mca/loops.py (natural
# loops of the control-flow graph; the iteration's size is checked by
# counting sdot / smmla / widening multiplies, see there) and the table is
# made by bench/llvm_mca/run.py.
#
# Limits (read before quoting a number):
# - llvm-mca is a static model: no cache misses, no branch mispredictions,
#   loads assumed not to alias stores (spills and reloads cost no
#   store-forwarding latency), front-end/decode not modelled;
# - LLVM 22 has no Cortex-A78 model (cortex-a78 = the Cortex-A57 model, a
#   core without dotprod); Neoverse N1 (A76 based) is shown as a proxy;
#   cortex-x3 uses the Neoverse V2 model (same numbers as neoverse-v2);
# - our kernels pick their features at run time (#[target_feature]); where
#   a loop still branches (an out-of-line conversion, as `half`'s f16 ->
#   f32 was before the tiles converted scales inline with `fcvt`), the path
#   taken is that of a CPU with fp16 (all three cores), see loops.py;
# - the tiles are matched by name, type and instruction counts; a loop not
#   found is shown as "-" (and named on stderr), e.g. an outer loop with
#   two levels of loops that the compiler did not unroll.
#
# Usage: bash bench/llvm_mca.sh [OUT.md]   (default: print the table)
# Env:   AARCH64_SKIP_INSTALL=1  do not touch apt
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/dev/stdout}
cache=.cache/llvm_mca
mkdir -p "$cache"
work=$(mktemp -d "${TMPDIR:-/tmp}/llvm_mca.XXXXXX")

# Tools: Debian's rustc-web (arm64 std) as in tests/aarch64.sh, LLVM 22's
# llvm-mca/objdump/cxxfilt and clang 22 (same LLVM as rustc-web).
pkgs=(rustc-web libstd-rust-web-dev:arm64 llvm-22 clang-22)
if [[ -z "${AARCH64_SKIP_INSTALL:-}" ]]; then
    missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        SUDO=""
        [[ $(id -u) -ne 0 ]] && SUDO=sudo
        dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
fi

# ggml: quants.c of the llama.cpp in the llama-cpp-python sdist.
ver=0.3.36
sdist=$cache/llama_cpp_python-$ver.tar.gz
[[ -f $sdist ]] || pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$ver" -d "$cache" >&2
g=$cache/llama_cpp_python-$ver/vendor/llama.cpp/ggml
[[ -d $g ]] || tar xzf "$sdist" -C "$cache" --wildcards "*/vendor/llama.cpp/ggml/*"
for v in neon:armv8-a dot:armv8.2-a+dotprod i8mm:armv8.2-a+dotprod+i8mm; do
    clang-22 --target=aarch64-linux-gnu -O3 -march="${v#*:}" -DNDEBUG -D_GNU_SOURCE \
        -I"$g/include" -I"$g/src" -I"$g/src/ggml-cpu" \
        -S "$g/src/ggml-cpu/arch/arm/quants.c" -o "$work/ggml_${v%%:*}.s"
done

# Ours: the release rlib for aarch64 with its assembly (v0 mangling keeps
# the generic parameters in the symbol names; codegen is unchanged).
export CARGO_TARGET_DIR=target/aarch64-cross RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
export CARGO_TERM_COLOR=never
deps=$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/deps
rm -f "$deps"/mllm_backends-*.s
nice -n 10 cargo rustc -q --release -p mllm-backends --no-default-features \
    --target aarch64-unknown-linux-gnu --lib -- --emit asm,link -C symbol-mangling-version=v0 >&2
cp "$deps"/mllm_backends-*.s "$work/ours.s"
cp backends/src/cpu/qlinear/k_quants/neon.rs "$work/kq_neon.rs"
# the bodies of small helpers our loops call (half's fcvt f16 -> f32)
llvm-objdump-22 -d --no-show-raw-insn --no-leading-addr "$deps"/libhalf-*.rlib > "$work/callees.txt"

python3 bench/llvm_mca/run.py "$work" "$work/ours.s" "$work/callees.txt" \
    "$work/ggml_neon.s" "$work/ggml_dot.s" "$work/ggml_i8mm.s" "$work/kq_neon.rs" > "$out"
echo "loops and llvm-mca inputs in $work" >&2
