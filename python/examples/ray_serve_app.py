"""A Ray Serve deployment of an `mllm` model: replicas over a Ray cluster
behind Ray Serve's HTTP proxy, which balances requests between them.

    ray start --head                       # on one machine
    ray start --address=HEAD:6379          # on each other machine
    python ray_serve_app.py --model SmolLM2-135M-Instruct.Q4_1.gguf --replicas 2
    curl -s localhost:8000/generate -d '{"prompt": "Hi", "max_tokens": 32, "temperature": 0}'

Each replica loads the model once and answers one request at a time
(`max_ongoing_requests=1`: a replica is one model); more replicas answer
more at once. Requests and answers are JSON: `{"prompt", "max_tokens",
"temperature", "seed", "stop", "system"}` in, `{"text", "node",
"stats"}` out. For an OpenAI-compatible server on one machine, `mllm serve`
is the tool; this is the scale-out path.
"""

import argparse
import sys

import ray
from ray import serve

import mllm

GENERATE_ARGS = ("max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stop",
                 "system", "raw", "repeat_penalty")


@serve.deployment(max_ongoing_requests=1)
class Generator:
    def __init__(self, model: str, threads: int = 1):
        self.model = mllm.load(model, threads=threads)
        self.node = ray.get_runtime_context().get_node_id()

    def generate(self, body: dict) -> dict:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ValueError("the request needs a string `prompt`")
        kwargs = {k: body[k] for k in GENERATE_ARGS if k in body}
        text = self.model.generate(prompt, **kwargs)
        return {"text": text, "node": self.node, "stats": self.model.last_stats}

    async def __call__(self, request) -> dict:
        return self.generate(await request.json())


def app(model: str, replicas: int = 2, threads: int = 1):
    """The application: `replicas` copies of the model, each on `threads`
    CPUs (Ray Serve spreads replicas over the nodes)."""
    return Generator.options(
        num_replicas=replicas, ray_actor_options={"num_cpus": threads}
    ).bind(model, threads)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a GGUF, .mllm file, HF directory (the same path on every node) or hf:// name")
    ap.add_argument("--address", default="auto", help="the Ray cluster (default: the running one)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (and Ray CPUs) per replica")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args()
    ray.init(address=args.address)
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(app(args.model, args.replicas, args.threads), route_prefix="/generate",
              blocking=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
