#!/usr/bin/env python3
"""Writes a Hugging Face Qwen3 checkpoint directory (config.json,
*.safetensors, tokenizer.json) as an f16 GGUF laid out as llama.cpp's
convert_hf_to_gguf.py lays out Qwen3 (architecture `qwen3`, the same tensor
names, norms kept in f32, the vocabulary padded to `vocab_size` with
`[PAD{i}]` tokens), with only `gguf` and `numpy`: bench/compare.sh uses it
for the random Qwen3-0.6B (`mllm random-checkpoint --preset qwen3-0.6b`), so
a benchmark machine needs neither torch nor transformers.

    python bench/qwen3_gguf.py HF_DIR OUT.gguf
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    """name -> float32 array, from one .safetensors file."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dt = info["dtype"]
        if dt not in DTYPES:
            sys.exit(f"{path}: tensor {name} has dtype {dt}; this script reads F32, F16, BF16")
        arr = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=DTYPES[dt])
        if dt == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr.astype(np.float32).reshape(info["shape"])
    return out


def gguf_name(hf):
    """convert_hf_to_gguf.py's Qwen3 tensor names."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"]:
        sys.exit(f"unexpected tensor {hf}")
    rest = ".".join(parts[3:])
    names = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    if rest not in names:
        sys.exit(f"unexpected tensor {hf}")
    return f"blk.{parts[2]}.{names[rest]}"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = Path(sys.argv[1]), sys.argv[2]
    c = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    w = gguf.GGUFWriter(dst, "qwen3")
    w.add_name("Qwen3 (random weights)")
    w.add_context_length(c.get("max_position_embeddings", 40960))
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c.get("num_key_value_heads", c["num_attention_heads"]))
    head_dim = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(c.get("rope_theta", 1000000.0))
    w.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    # Vocabulary: byte-level BPE as the converter writes Qwen's (`gpt2`,
    # pre-tokenizer `qwen2`), added tokens as control tokens, padded.
    vocab = dict(tok["model"]["vocab"])
    special = set()
    for t in tok["added_tokens"]:
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special.add(t["id"])
    size = c["vocab_size"]
    by_id = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(size):
        if i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = vocab.get("<|im_end|>", vocab.get("<|endoftext|>"))
    w.add_eos_token_id(eos)
    w.add_pad_token_id(vocab.get("<|endoftext|>", eos))
    w.add_bos_token_id(vocab.get("<|endoftext|>", eos))
    w.add_add_bos_token(False)

    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(read_safetensors(f))
    if c.get("tie_word_embeddings") and "lm_head.weight" in tensors:
        del tensors["lm_head.weight"]
    for name in sorted(tensors, key=lambda n: (not n.startswith("model.embed"), n)):
        arr = tensors[name]
        # The converter keeps 1-D tensors (norms) in f32.
        arr = arr.astype(np.float32 if arr.ndim == 1 else np.float16)
        w.add_tensor(gguf_name(name), arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
