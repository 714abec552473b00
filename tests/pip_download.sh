# Sourced by the fetch scripts: pip_download PKG DEST_DIR downloads one wheel
# (no dependencies) with $PIP, else python3 -m pip, else pip3; calls the
# sourcing script's `fail` with a message when none is found or PyPI fails.
pip_download() {
    local pkg="$1" dest="$2" cmd=()
    if [[ -n "${PIP:-}" ]]; then
        cmd=("$PIP")
    elif command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1; then
        cmd=(python3 -m pip)
    elif command -v pip3 >/dev/null; then
        cmd=(pip3)
    else
        fail "no pip found (set PIP=/path/to/pip) to download $pkg"
    fi
    "${cmd[@]}" download --no-deps "$pkg" -d "$dest" ||
        fail "pip download $pkg failed (is PyPI reachable?)"
}
