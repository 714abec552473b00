"""Batch inference over a Ray cluster with Ray Data and the `mllm` module.

Each Ray actor loads the model once (`mllm.load`) and answers the batches
Ray Data hands it; Ray places the actors over the cluster's nodes, feeds
them and gathers the answers. Nothing here is cluster code of ours: it is
`ray.data.Dataset.map_batches` with a class.

    ray start --head                       # on one machine
    ray start --address=HEAD:6379          # on each other machine
    python ray_data_batch.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
        --prompts prompts.txt --actors 2 --output answers.jsonl

Every node needs the `mllm` module (`pip install ./python`) and the model:
the same path on each, or a name (`hf://ORG/NAME:Q4_K_M`) that each node
fetches into its own Hugging Face cache.
"""

import argparse
import json
import sys

import ray

import mllm


class Answerer:
    """One model per actor; `__call__` answers one batch of prompts."""

    def __init__(self, model: str, threads: int, max_tokens: int, temperature: float):
        self.model = mllm.load(model, threads=threads)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.node = ray.get_runtime_context().get_node_id()

    def __call__(self, batch: dict) -> dict:
        prompts = [str(p) for p in batch["prompt"]]
        answers = [
            self.model.generate(p, max_tokens=self.max_tokens, temperature=self.temperature, seed=0)
            for p in prompts
        ]
        return {"prompt": prompts, "answer": answers, "node": [self.node] * len(prompts)}


def answer_all(
    prompts: list[str],
    model: str,
    actors: int = 2,
    threads: int = 1,
    max_tokens: int = 64,
    temperature: float = 0.0,
    batch_size: int = 2,
) -> list[dict]:
    """The answers to `prompts` (in their order), each with the Ray node
    that computed it. Needs `ray.init()` to have been called."""
    ds = ray.data.from_items([{"prompt": p} for p in prompts])
    answered = ds.map_batches(
        Answerer,
        fn_constructor_kwargs={
            "model": model,
            "threads": threads,
            "max_tokens": max_tokens,
            "temperature": temperature,
        },
        concurrency=actors,
        batch_size=batch_size,
        # Ray places the actors (its default policy packs a node to half
        # its CPUs, then spreads).
        num_cpus=threads,
    )
    rows = {r["prompt"]: r for r in answered.take_all()}
    return [dict(rows[p]) for p in prompts]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a GGUF, .mllm file, HF directory (the same path on every node) or hf:// name")
    ap.add_argument("--prompts", required=True, help="one prompt per line")
    ap.add_argument("--output", default="-", help="JSON lines out (- for standard output)")
    ap.add_argument("--address", default="auto", help="the Ray cluster (default: the running one)")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (and Ray CPUs) per actor")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [line.rstrip("\n") for line in f if line.strip()]
    ray.init(address=args.address)
    rows = answer_all(prompts, args.model, args.actors, args.threads, args.max_tokens,
                      args.temperature)
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    for row in rows:
        out.write(json.dumps({"prompt": row["prompt"], "answer": row["answer"]}) + "\n")
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
