"""The Ray examples (python/examples/) on a local Ray cluster of two nodes
(`ray start --head` and `ray start --address=...`, PyPI `ray`): prompts
mapped over the cluster with Ray Data, and sent to a two-replica Ray Serve
deployment, get the greedy answers one process gives, and both nodes do
part of the work."""

import concurrent.futures
import importlib.util
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import mllm

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / ".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
EXAMPLES = ROOT / "python/examples"
RAY = pathlib.Path(sys.executable).parent / "ray"
PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Name three colours.",
    "Write a haiku about the sea.",
    "What is 2 + 2?",
    "Give me a word that rhymes with cat.",
    "Who wrote Hamlet?",
]
MAX_TOKENS = 24

# Ray Serve's own models use pydantic features pydantic 2 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def one_process():
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is missing: run `bash tests/fetch_assets.sh` first")
    model = mllm.load(SMOLLM2, threads=1)
    return {p: model.generate(p, max_tokens=MAX_TOKENS, temperature=0) for p in PROMPTS}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node and one worker node on this machine, 2 logical CPUs each."""
    import ray

    if not RAY.is_file():
        pytest.fail(f"{RAY} is missing: python/test.sh installs ray into the venv")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    common = ["--num-cpus=2", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    subprocess.run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                    f"--temp-dir={temp}", *common], check=True, env=env)
    try:
        subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}", *common], check=True,
                       env=env)
        ray.init(address=f"127.0.0.1:{port}", logging_level="warning")
        alive = [n for n in ray.nodes() if n["Alive"]]
        assert len(alive) == 2, alive
        yield ray
        ray.shutdown()
    finally:
        subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True)


def test_ray_data_maps_prompts_over_the_cluster(cluster, one_process):
    batch = example("ray_data_batch")
    rows = batch.answer_all(PROMPTS, str(SMOLLM2), actors=2, threads=1,
                            max_tokens=MAX_TOKENS, temperature=0, batch_size=1)
    assert [r["prompt"] for r in rows] == PROMPTS
    for row in rows:
        assert row["answer"] == one_process[row["prompt"]], row
    nodes = {r["node"] for r in rows}
    assert len(nodes) == 2, f"one node did all the work: {nodes}"


def test_ray_serve_replicas_answer_as_one_process(cluster, one_process):
    from ray import serve

    serve_app = example("ray_serve_app")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(serve_app.app(str(SMOLLM2), replicas=2, threads=1), route_prefix="/generate")

        def ask(prompt):
            body = json.dumps({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
            # Ray's HTTP proxies learn the route a moment after serve.run
            # returns and answer 404 until then: retry those for a while.
            deadline = time.monotonic() + 60
            while True:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/generate",
                                             data=body.encode(), method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        return json.load(resp)
                except urllib.error.HTTPError as e:
                    if e.code != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        # Twice the prompts, all at once: both replicas get some.
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(ask, PROMPTS * 2))
        for prompt, answer in zip(PROMPTS * 2, answers):
            assert answer["text"] == one_process[prompt], (prompt, answer)
            assert answer["stats"]["generated_tokens"] <= MAX_TOKENS
        nodes = {a["node"] for a in answers}
        assert len(nodes) == 2, f"one replica's node did all the work: {nodes}"
    finally:
        serve.shutdown()
