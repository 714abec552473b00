#!/usr/bin/env bash
# Cross-builds mllm-backends for aarch64 (Linux) and runs its tests under
# qemu-user, so the NEON kernels (cpu/simd.rs, cpu/qlinear/) are compiled
# and checked on a machine without an Arm CPU.
#
# The rustup toolchain cannot fetch another target's std here, so this uses
# Debian's `rustc-web` cross toolchain (a newer rustc than Debian's `rustc`,
# with an arm64 std in `libstd-rust-web-dev:arm64`), gcc-aarch64-linux-gnu as
# the linker and qemu-aarch64 as the test runner. Installing is idempotent:
# nothing is fetched when the packages are already there.
#
# The tests run twice: on qemu's `max` CPU (NEON with the dotprod extension,
# so the `vdotq_s32` paths) and on a Cortex-A72 (plain NEON, the fallback).
#
# Usage: bash tests/aarch64.sh [extra cargo test args, e.g. -- qlinear]
# Env:   AARCH64_CPUS="max cortex-a72"  the qemu CPU models to test on
#        AARCH64_SKIP_INSTALL=1         do not touch apt
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)

if [[ -z "${AARCH64_SKIP_INSTALL:-}" ]]; then
    missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "== installing ${missing[*]}"
        SUDO=""
        [[ $(id -u) -ne 0 ]] && SUDO=sudo
        if ! dpkg --print-foreign-architectures | grep -qx arm64; then
            $SUDO dpkg --add-architecture arm64
        fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
    fi
fi

# rustc-web installs /usr/bin/rustc; rustup's proxy in ~/.cargo/bin usually
# comes first on PATH, so name it by path. Cargo is whichever is on PATH.
RUSTC_WEB=/usr/bin/rustc
if [[ ! -x "$RUSTC_WEB" || ! -d /usr/lib/rustlib/aarch64-unknown-linux-gnu ]]; then
    echo "Debian's rustc with an aarch64 std not found (apt-get install ${pkgs[*]})" >&2
    exit 1
fi
echo "== $("$RUSTC_WEB" --version) for aarch64-unknown-linux-gnu"

# A target dir of its own: another compiler must not invalidate the host
# build in target/.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR_AARCH64:-target/aarch64-cross}"
export RUSTC="$RUSTC_WEB"
export RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# Static: under qemu-user, the dynamically linked arm64 glibc hangs in
# pthread_create (seen with qemu 7.2 and 10.0, C programs too), and every
# test binary starts threads.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64"
export CARGO_TERM_COLOR=never

# Without the OpenCL backend: these binaries are static (see above) and a
# static binary cannot dlopen the OpenCL library; the kernels under test
# here are the CPU's.
start=$(date +%s)
cargo test --no-run -p mllm-backends --no-default-features --target aarch64-unknown-linux-gnu
echo "== built in $(($(date +%s) - start)) s"

status=0
for cpu in ${AARCH64_CPUS:-max cortex-a72}; do
    t0=$(date +%s)
    echo "== cargo test -p mllm-backends on qemu-aarch64 -cpu $cpu"
    QEMU_CPU="$cpu" cargo test -p mllm-backends --no-default-features --target aarch64-unknown-linux-gnu "$@" || status=$?
    echo "== -cpu $cpu: $(($(date +%s) - t0)) s"
done
echo "== total $(($(date +%s) - start)) s"
exit "$status"
