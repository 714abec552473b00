"""`mllm.load("hf://ORG/NAME:TYPE")`: the model fetched by name into the
Hugging Face cache (as `mllm pull` does) from the stand-in Hub
(tests/hub/stand_in_hub.py) serving the real SmolLM2 GGUF, then loaded from
the cache again with HF_HUB_OFFLINE=1."""

import pathlib
import subprocess
import sys

import pytest

import mllm

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / ".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = "What is the capital of France? Answer in one sentence."
ANSWER = "The capital of France is Paris."


@pytest.fixture
def hub(tmp_path, monkeypatch):
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is missing: run `bash tests/fetch_assets.sh` first")
    repo = tmp_path / "repos/test-org/SmolLM2-GGUF"
    repo.mkdir(parents=True)
    (repo / SMOLLM2.name).symlink_to(SMOLLM2)
    (repo / "README.md").write_text("# SmolLM2\n")
    server = subprocess.Popen(
        [sys.executable, ROOT / "tests/hub/stand_in_hub.py", "--root", tmp_path / "repos"],
        stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    assert line.startswith("listening on "), line
    monkeypatch.setenv("HF_ENDPOINT", line.split()[-1])
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield tmp_path, server
    server.kill()
    server.wait()


def test_load_by_name_then_offline(hub, monkeypatch):
    home, server = hub
    name = "hf://test-org/SmolLM2-GGUF:Q4_1"
    model = mllm.load(name, threads=2)
    assert model.path == name
    assert model.generate(QUESTION, temperature=0) == ANSWER
    cached = list((home / "hf-home/hub/models--test-org--SmolLM2-GGUF/snapshots").glob("*/*"))
    assert [p.name for p in cached] == [SMOLLM2.name]  # the README stayed on the Hub
    assert cached[0].read_bytes() == SMOLLM2.read_bytes()
    with pytest.raises(FileNotFoundError, match="no file or quantization `Q8_0`"):
        mllm.load("hf://test-org/SmolLM2-GGUF:Q8_0")
    with pytest.raises(ValueError, match="not a Hugging Face model reference"):
        mllm.load("hf://a/b/c")
    # With the Hub gone, offline: the cache alone.
    server.kill()
    server.wait()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = mllm.load(name, threads=2)
    assert again.generate(QUESTION, temperature=0) == ANSWER
