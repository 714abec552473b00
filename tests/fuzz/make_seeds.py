#!/usr/bin/env python3
"""Seed inputs for the fuzz targets, made from the repository's fixtures and
the real tokenizers `tests/fetch_assets.sh` puts in `.cache/`.

    python3 tests/fuzz/make_seeds.py [OUT]     (default tests/fuzz/corpus_raw)

writes OUT/<target>/<name>, one folder per target in fuzz_targets/. Seeds
are kept small (libFuzzer mutates whole inputs; big ones are slow): real
vocabularies are cut to their first few hundred tokens and the merges among
them, multi-file inputs are joined with the `PART` separator of
tests/fuzz/src/lib.rs. `.mllm` seeds are converted from the tiny GGUF
fixture with `mllm convert` ($MLLM, default target/release/mllm).

`tests/fuzz/corpus/` holds what `cargo fuzz cmin` kept of these plus what
fuzzing found; this script documents and regenerates the starting point.
Only the Python standard library is used.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
PART = b"\n%%part%%\n"
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fuzz" / "corpus_raw"


def need(path):
    """A required asset; a missing one stops the script with what to do."""
    if not path.exists():
        sys.exit(f"make_seeds: {path} is missing (run `bash tests/fetch_assets.sh` first)")
    return path


def put(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    (d / name).write_bytes(data)


# --- GGUF: a metadata reader and a writer ------------------------------------
# Value types of the GGUF spec (llama.cpp's gguf.md).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_meta(path):
    """The key/value metadata of a GGUF file as {key: (type, value)}."""
    b = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = b[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    def value(t):
        if t in SCALARS:
            return take(SCALARS[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        raise ValueError(f"GGUF value type {t}")

    assert b[:4] == b"GGUF", path
    pos = 4
    take("<I")
    take("<Q")
    n_kv = take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        t = take("<I")
        meta[k] = (t, value(t))
    return meta


def gguf_bytes(meta):
    """A tensor-less GGUF v3 file holding `meta` ({key: (type, value)})."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta)))

    def string(s):
        e = s.encode("utf-8")
        out.extend(struct.pack("<Q", len(e)) + e)

    def value(t, v):
        if t in SCALARS:
            out.extend(struct.pack(SCALARS[t], v))
        elif t == 8:
            string(v)
        else:
            et, items = v
            out.extend(struct.pack("<IQ", et, len(items)))
            for x in items:
                value(et, x)

    for k, (t, v) in meta.items():
        string(k)
        out.extend(struct.pack("<I", t))
        value(t, v)
    return bytes(out)


def trim_bpe_vocab(tokens, merges, keep):
    """The first `keep` tokens and the merges whose parts and result stay."""
    kept = tokens[:keep]
    have = set(kept)
    ok = []
    for m in merges:
        left, _, right = m.partition(" ")
        if left in have and right in have and left + right in have:
            ok.append(m)
    return kept, ok


# --- tokenizer.json -----------------------------------------------------------
def trim_tokenizer_json(doc, keep):
    """A real tokenizer.json cut to ids below `keep` (plus a few added tokens)."""
    model = doc["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < keep}
    merges = []
    for m in model.get("merges", []):
        left, right = m if isinstance(m, list) else m.split(" ", 1)
        if left in vocab and right in vocab and left + right in vocab:
            merges.append(m)
    model["vocab"] = vocab
    model["merges"] = merges
    added = doc.get("added_tokens", [])[:4]
    for i, t in enumerate(added):
        t["id"] = keep + i
    doc["added_tokens"] = added
    return doc


def tokenizer_seeds(corpus):
    texts = [corpus[0], corpus[2], corpus[3], "<|im_start|>user\nhi<|im_end|>\n  \t x"]
    for name in ["qwen3", "llama2"]:
        doc = json.loads(need(ROOT / ".cache" / "npm" / name / "tokenizer.json").read_text())
        small = json.dumps(trim_tokenizer_json(doc, 320), ensure_ascii=False).encode()
        for i, text in enumerate(texts):
            put("tokenizer_json", f"{name}_{i}", small + PART + text.encode())


# --- safetensors --------------------------------------------------------------
def safetensors_bytes(tensors):
    """tensors: [(name, dtype, shape, raw bytes)]."""
    header, data = {}, bytearray()
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data.extend(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


def safetensors_seeds():
    for p in [FIX / "pytorch" / "tiny.safetensors", FIX / "gguf" / "tiny_qwen3.safetensors"]:
        put("safetensors", p.stem, need(p).read_bytes())
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    a = safetensors_bytes([("w.weight", "F32", [2, 3], f32), ("b", "BF16", [2], b"\x80\x3f\x00\x40")])
    b = safetensors_bytes([("x.weight", "F16", [3], b"\x00\x3c\x00\x40\x00\x42"), ("i", "I32", [1], b"\x07\0\0\0")])
    put("safetensors", "mixed", a)
    index = {"metadata": {"total_size": 38}, "weight_map": {"w.weight": "a.safetensors", "b": "a.safetensors", "x.weight": "b.safetensors", "i": "b.safetensors"}}
    put("safetensors_index", "two_shards", json.dumps(index).encode() + PART + a + PART + b)
    one = {"weight_map": {"w.weight": "a.safetensors", "b": "a.safetensors"}}
    put("safetensors_index", "one_shard", json.dumps(one).encode() + PART + a)


# --- PyTorch ------------------------------------------------------------------
def pytorch_seeds():
    for p in sorted((FIX / "pytorch").glob("*.pt")) + [FIX / "pytorch" / "tiny.bin"]:
        put("pytorch", p.name, b"\x00" + need(p).read_bytes())
    # The same state dict as the target packs it: data.pkl, then storages.
    z = zipfile.ZipFile(FIX / "pytorch" / "tiny.bin")
    pkl = z.read("tiny/data.pkl")
    storages = [z.read(f"tiny/data/{i}") for i in range(9)]
    put("pytorch", "tiny_parts_stored", b"\x01" + PART.join([pkl] + storages))
    put("pytorch", "tiny_parts_deflated", b"\x03" + PART.join([pkl] + storages))


# --- GGUF files and vocabularies ---------------------------------------------
def gguf_seeds():
    for p in [FIX / "gguf" / "tiny_qwen3.gguf", FIX / "gguf" / "tiny_llama.gguf"]:
        put("gguf", p.stem, need(p).read_bytes())
    smol = gguf_meta(need(ROOT / ".cache" / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tok_t, tokens = smol["tokenizer.ggml.tokens"][1]
    _, merges = smol["tokenizer.ggml.merges"][1]
    tokens, merges = trim_bpe_vocab(tokens, merges, 400)
    meta = {"general.architecture": (8, "llama")}
    for k, (t, v) in smol.items():
        if k.startswith("tokenizer.") and k != "tokenizer.chat_template":
            meta[k] = (t, v)
    meta["tokenizer.ggml.tokens"] = (9, (tok_t, tokens))
    meta["tokenizer.ggml.merges"] = (9, (8, merges))
    meta["tokenizer.ggml.token_type"] = (9, (5, smol["tokenizer.ggml.token_type"][1][1][:400]))
    for k in ["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"]:
        if f"tokenizer.ggml.{k}" in meta:
            meta[f"tokenizer.ggml.{k}"] = (4, min(meta[f"tokenizer.ggml.{k}"][1], 399))
    put("gguf_vocab", "smollm2_gpt2", gguf_bytes(meta))

    l2 = json.loads(need(ROOT / ".cache" / "npm" / "llama2" / "tokenizer.json").read_text())
    vocab = sorted(l2["model"]["vocab"].items(), key=lambda kv: kv[1])[:400]
    toks = [t for t, _ in vocab]
    types = [2 if t == "<unk>" else 3 if t in ("<s>", "</s>") else 6 if t.startswith("<0x") else 1 for t in toks]
    scores = [0.0 if ty != 1 else -float(i) for i, ty in enumerate(types)]
    llama = {
        "general.architecture": (8, "llama"),
        "tokenizer.ggml.model": (8, "llama"),
        "tokenizer.ggml.tokens": (9, (8, toks)),
        "tokenizer.ggml.scores": (9, (6, scores)),
        "tokenizer.ggml.token_type": (9, (5, types)),
        "tokenizer.ggml.bos_token_id": (4, 1),
        "tokenizer.ggml.eos_token_id": (4, 2),
        "tokenizer.ggml.unknown_token_id": (4, 0),
        "tokenizer.ggml.add_bos_token": (7, True),
    }
    put("gguf_vocab", "llama2_spm", gguf_bytes(llama))
    put("gguf", "vocab_only", gguf_bytes(meta))
    return smol["tokenizer.chat_template"][1]


# --- chat templates -----------------------------------------------------------
def chat_template_seeds(smol_template):
    d = json.loads((FIX / "tokenizer" / "chat_templates.json").read_text())
    templates = dict(d["custom_templates"])
    templates["qwen3"] = json.loads(need(ROOT / ".cache" / "npm" / "qwen3" / "tokenizer_config.json").read_text())["chat_template"]
    templates["smollm2"] = smol_template
    seen = set()
    for case in d["cases"]:
        name = case["template"]
        key = (name, case["conversation"])
        if name not in templates or key in seen:
            continue
        seen.add(key)
        msgs = json.dumps(case["messages"], ensure_ascii=False)
        put("chat_template", f"{name}_{case['conversation']}", templates[name] + PART.decode() + msgs)
    for name, t in templates.items():
        put("chat_template", f"{name}_text", t + PART.decode() + "Hello {{ there }} <|im_end|>")


# --- images -------------------------------------------------------------------
def image_seeds():
    for name in ["tiny_5x3.png", "camera_gray.png", "chelsea.webp", "lossless_61x45.webp", "rocket_exif6.jpg", "rgba_70x50.png", "coffee.jpg"]:
        put("image", name, need(FIX / "vision" / "images" / name).read_bytes())
    cfg = {"patch_size": 8, "temporal_patch_size": 2, "merge_size": 2, "size": {"shortest_edge": 256, "longest_edge": 4096}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    tiny = (FIX / "vision" / "images" / "tiny_5x3.png").read_bytes()
    put("image", "tiny_with_config", tiny + PART + json.dumps(cfg).encode())


# --- .mdl scripts -------------------------------------------------------------
def mdl_seeds():
    scripts = sorted((ROOT / "models").glob("*.mdl")) + sorted((ROOT / "stdlib").glob("*.mdl"))
    scripts += sorted((ROOT / "tests" / "dsl").glob("*.mdl")) + sorted((ROOT / "tests" / "lang").glob("*.mdl"))
    for p in scripts:
        put("mdl_check", f"{p.parent.name}_{p.name}", p.read_bytes())
    for p in [ROOT / "models" / "qwen3.mdl", ROOT / "tests" / "lang" / "semantics.mdl"]:
        put("mdl_run", p.name, p.read_bytes())
    put("mdl_run", "small.mdl", "fn main() {\n  let x = zeros([2, 3])\n  let y = x + 1.0\n  return sum(y)\n}\n")


# --- .mllm files --------------------------------------------------------------
def mllm_seeds():
    mllm = Path(os.environ.get("MLLM", ROOT / "target" / "release" / "mllm"))
    if not mllm.is_file():
        sys.exit(f"make_seeds: no mllm binary at {mllm} (cargo build --release -p mllm-cli, or set MLLM)")
    tmp = OUT / "_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    for q in ["f32", "q4_0", "q8_0"]:
        dst = tmp / f"tiny_{q}.mllm"
        subprocess.run([str(mllm), "convert", str(FIX / "gguf" / "tiny_qwen3.gguf"), str(dst), "-q", q], check=True, capture_output=True)
        put("mllm_file", dst.name, dst.read_bytes())
    shutil.rmtree(tmp)


def main():
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    mdl_seeds()
    safetensors_seeds()
    pytorch_seeds()
    smol_template = gguf_seeds()
    tokenizer_seeds(corpus)
    chat_template_seeds(smol_template)
    image_seeds()
    mllm_seeds()
    for d in sorted(OUT.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


main()
