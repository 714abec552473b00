#!/usr/bin/env python3
"""A random-weight Qwen3.5 of the published 0.8B shape with an MTP head,
for timing what `--spec-type mtp` costs at a real size (random weights
guess nothing, so this measures the cost side only; acceptance is measured
on the trained fixture, tests/fixtures/qwen3_5_mtp/trained):

    .cache/venv-fixtures/bin/python bench/mtp_random_model.py .cache/mtp-0.8b
    mllm convert .cache/mtp-0.8b -o .cache/mtp-0.8b.q8_0.mllm -q q8_0
    mllm bench -m .cache/mtp-0.8b.q8_0.mllm -p 0 -n 64 --spec-type mtp --prompt-file F

transformers initialises the model (its own init: DeltaNet decay and
step sizes in range); the head is the fixture script's torch MtpHead with
the same init scale. Shapes: hidden 1024, 24 layers (every 4th full
attention), 8 query / 2 key-value heads of 256, DeltaNet 16 key / 16 value
heads of 128, MLP 3584, vocabulary 248320, tied embeddings.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))

import torch  # noqa: E402
from make_qwen3_5_mtp_trained import MtpHead  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/mtp-0.8b")
    torch.manual_seed(0)
    cfg = Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_num_key_heads=16, linear_num_value_heads=16, full_attention_interval=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=4096, tie_word_embeddings=True, mtp_num_hidden_layers=1,
    )
    with torch.no_grad():
        model = Qwen3_5ForCausalLM(cfg).to(torch.bfloat16)
        head = MtpHead(cfg)
        for name, p in head.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, cfg.initializer_range)
        head = head.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
    st = out / "model.safetensors"
    w = load_file(st)
    w.update({f"mtp.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(w, st, metadata={"format": "pt"})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
