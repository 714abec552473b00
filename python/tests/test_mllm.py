"""The `mllm` module on real models: the SmolLM2-135M-Instruct Q4_1 GGUF
(fetched by tests/fetch_assets.sh) and the tiny random Qwen3-VL fixture for
images. Greedy answers are compared with what `mllm run --temp 0` prints."""

import _thread
import json
import pathlib
import subprocess
import signal
import threading
import time

import pytest

import mllm

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM2 = ROOT / ".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf"
VL = ROOT / "tests/fixtures/qwen3_vl/p16_m2_tied_published"
IMAGE = ROOT / "tests/fixtures/qwen3_vl/run_images/a_160x120.png"
CLI = ROOT / "target/debug/mllm"
QUESTION = "What is the capital of France? Answer in one sentence."
ANSWER = "The capital of France is Paris."
STORY = "Tell me a long story about a dragon who learns to cook."


@pytest.fixture(scope="module")
def model():
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is missing: run `bash tests/fetch_assets.sh` first")
    return mllm.load(SMOLLM2, threads=2)


def test_greedy_generate_is_what_the_cli_answers(model):
    assert model.generate(QUESTION, temperature=0) == ANSWER
    stats = model.last_stats
    assert stats["stop_reason"] == "eos"
    assert stats["prompt_tokens"] == 42
    assert stats["generated_tokens"] == 7
    if CLI.is_file():
        out = subprocess.run(
            [CLI, "run", "--model", SMOLLM2, "--prompt", QUESTION, "--temp", "0"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.rstrip("\n") == ANSWER


def test_streamed_pieces_join_to_the_whole_answer(model):
    whole = model.generate(STORY, temperature=0, max_tokens=40)
    pieces = list(model.generate(STORY, temperature=0, max_tokens=40, stream=True))
    assert len(pieces) > 10
    assert all(isinstance(p, str) and p for p in pieces)
    assert "".join(pieces) == whole
    assert model.last_stats["stop_reason"] == "length"
    assert model.last_stats["generated_tokens"] == 40
    # The same prompt again takes all but its last token from the cache:
    # on the CPU a token's numbers do not depend on how its prompt was cut
    # into steps, so the answer is the same (checked above).
    assert model.last_stats["prompt_computed"] == 1
    assert model.last_stats["prompt_tokens"] > 1


def test_a_seed_repeats_a_sampled_answer(model):
    a = model.generate(STORY, temperature=0.9, seed=7, max_tokens=24)
    b = model.generate(STORY, temperature=0.9, seed=7, max_tokens=24)
    assert a == b and a


def test_stop_strings_and_raw_text(model):
    assert model.generate(QUESTION, temperature=0, stop=" Paris") == "The capital of France is"
    assert model.last_stats["stop_reason"] == "stop"
    assert model.generate(QUESTION, temperature=0, stop=["xyz", " of"]) == "The capital"
    text = model.generate("The capital of France is", raw=True, temperature=0, max_tokens=5)
    assert text and model.last_stats["generated_tokens"] == 5
    assert model.last_stats["prompt_tokens"] == len(model.tokenize("The capital of France is"))


def test_chat_continues_a_conversation(model):
    messages = [{"role": "user", "content": QUESTION}]
    assert model.chat(messages, temperature=0) == ANSWER
    messages += [
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "And what is the capital of Germany?"},
    ]
    answer = model.chat(messages, temperature=0, max_tokens=30)
    assert isinstance(answer, str) and answer
    stats = model.last_stats
    # Only the new turn was computed: the rest was in the KV cache.
    assert stats["prompt_computed"] < stats["prompt_tokens"] / 2
    pieces = list(model.chat(messages, temperature=0, max_tokens=30, stream=True))
    assert "".join(pieces) == answer
    system = [{"role": "system", "content": "Answer in French."}, messages[0]]
    assert isinstance(model.chat(system, temperature=0, max_tokens=10), str)


def test_tokens_round_trip(model):
    text = "Hello, world! Ünïcödé 🙂"
    ids = model.tokenize(text)
    assert all(isinstance(i, int) for i in ids) and len(ids) > 3
    assert model.detokenize(ids) == text
    # The chat prompt tokenizes as transformers does.
    g = json.loads((ROOT / "tests/fixtures/smollm2/greedy.json").read_text())
    assert model.tokenize(g["prompt_text"]) == g["prompt_ids"]
    assert model.detokenize(g["prompt_ids"], skip_special=True).startswith("system\nYou are")


def test_errors_raise_with_messages(model):
    with pytest.raises(FileNotFoundError, match="no-such-model.gguf"):
        mllm.load("/no/such/dir/no-such-model.gguf")
    with pytest.raises(mllm.MllmError):
        mllm.load(ROOT / "python/pyproject.toml")
    with pytest.raises(ValueError, match="no messages"):
        model.chat([])
    with pytest.raises(ValueError, match="content"):
        model.chat([{"role": "user"}])
    with pytest.raises(mllm.MllmError):
        model.detokenize([1 << 30])
    # Images on a text-only model.
    with pytest.raises(mllm.MllmError):
        model.generate("Describe it.", images=[str(IMAGE)])
    small = mllm.load(SMOLLM2, context=64)
    assert small.context == 64
    with pytest.raises(mllm.MllmError, match="context"):
        small.generate("word " * 100, raw=True)
    # The model still answers after errors.
    assert model.generate(QUESTION, temperature=0) == ANSWER


def test_closing_a_stream_cancels_it(model):
    stream = model.generate(STORY, temperature=0, max_tokens=300, stream=True)
    first = [next(stream) for _ in range(3)]
    assert all(first)
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    assert model.generate(QUESTION, temperature=0) == ANSWER


def test_cancel_from_another_thread(model):
    started = threading.Event()
    pieces = []

    def consume():
        for p in model.generate(STORY, temperature=0, max_tokens=300, stream=True):
            pieces.append(p)
            started.set()

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(60)
    model.cancel()
    t.join(60)
    assert not t.is_alive()
    assert model.last_stats["stop_reason"] == "cancelled"
    assert model.last_stats["generated_tokens"] < 300


def test_ctrl_c_cancels_an_answer(model):
    # A process started in the background of a non-interactive shell
    # inherits SIGINT ignored, and then Python raises no KeyboardInterrupt
    # at all: give the signal Python's own handler for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_cancels_an_answer(model)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_cancels_an_answer(model):
    timer = threading.Timer(1.0, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        model.generate(STORY, temperature=0, max_tokens=5000)
    timer.join()
    assert time.monotonic() - start < 30
    # The answer was cancelled; the next one waits for it to stop.
    assert model.generate(QUESTION, temperature=0) == ANSWER


def test_the_gil_is_released_while_generating(model):
    done = threading.Event()

    def work():
        model.generate(STORY, temperature=0, max_tokens=48)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    spins = 0
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        spins += 1
    t.join()
    # With the GIL held through the whole answer this loop would barely run.
    assert spins > 10_000


def test_images_with_a_vision_language_model():
    vl = mllm.load(VL)
    messages = [{"role": "user", "content": "Describe this image."}]
    by_chat = vl.chat(messages, images=[str(IMAGE)], temperature=0, max_tokens=6)
    assert vl.last_stats["prompt_tokens"] == 39  # as `mllm run --image` counts
    by_generate = vl.generate("Describe this image.", images=[IMAGE], temperature=0, max_tokens=6)
    assert by_chat == by_generate
    # The same image given in the message itself.
    messages[0]["images"] = [str(IMAGE)]
    assert vl.chat(messages, temperature=0, max_tokens=6) == by_chat
    with pytest.raises(mllm.MllmError, match="no-such.png"):
        vl.chat(messages, images=["/no-such.png"], max_tokens=2)


def test_model_attributes(model):
    assert model.path == str(SMOLLM2)
    assert model.has_chat_template
    assert model.context == 8192
    assert repr(model) == f'mllm.Model("{SMOLLM2}")'
    assert mllm.__version__ == "0.1.0"


def test_keyword_defaults_are_the_engines():
    # The signatures spell the defaults for help(); they must be the
    # runtime's one table (mllm.DEFAULTS comes from it).
    import inspect

    for method in (mllm.Model.generate, mllm.Model.chat):
        params = inspect.signature(method).parameters
        for name, value in mllm.DEFAULTS.items():
            assert params[name].default == pytest.approx(value), (method, name)


def test_answers_follow_a_json_schema_or_a_grammar(model):
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "population": {"type": "integer", "minimum": 0},
        },
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    for seed in range(3):
        text = model.generate(
            "Name a city and its population.", json_schema=schema, temperature=1.0, seed=seed, max_tokens=64
        )
        answer = json.loads(text)
        assert set(answer) == {"city", "population"}, text
        assert isinstance(answer["population"], int) and answer["population"] >= 0, text
    # The schema as JSON text (seeded: the default temperature samples).
    text = model.generate("A JSON object:", json_schema=json.dumps(schema), seed=0, max_tokens=64)
    assert isinstance(json.loads(text), dict), text
    text = model.chat([{"role": "user", "content": "Yes or no?"}], grammar='root ::= "yes" | "no"')
    assert text in ("yes", "no"), text
    with pytest.raises(ValueError, match="JSON schema cannot be used"):
        model.generate("x", json_schema={"type": "objekt"})
    with pytest.raises(ValueError, match="give one"):
        model.generate("x", json_schema=schema, grammar='root ::= "a"')


EMBEDDINGS = ROOT / "tests/fixtures/embeddings"


def f32_rows(path, name):
    """An f32 [n, d] tensor of a safetensors file, as lists."""
    import array
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    info = json.loads(raw[8 : 8 + n])[name]
    assert info["dtype"] == "F32"
    start, end = info["data_offsets"]
    values = array.array("f", raw[8 + n + start : 8 + n + end])
    rows, cols = info["shape"]
    return [list(values[r * cols : (r + 1) * cols]) for r in range(rows)]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


def test_embeddings_match_sentence_transformers():
    d = EMBEDDINGS / "qwen3_embedding"
    ref = json.loads((d / "reference.json").read_text())
    e = mllm.load_embedder(d, threads=2)
    assert e.dimension == 32 and "Embedder" in repr(e)
    for key, kw in [("plain", {}), ("query", {"prompt_name": "query"})]:
        got = e.embed(ref["inputs"], **kw)
        want = f32_rows(d / "reference.safetensors", key)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert cosine(g, w) >= 0.9999
    short = e.embed(["x"], dimensions=8, normalize=True)[0]
    assert len(short) == 8 and abs(sum(v * v for v in short) - 1) < 1e-5
    with pytest.raises(ValueError, match="dimensions"):
        e.embed(["x"], dimensions=33)
    with pytest.raises(ValueError, match="no input"):
        e.embed([])
    with pytest.raises(FileNotFoundError):
        mllm.load_embedder(ROOT / "no-such-model")


def test_rerankers_match_cross_encoder_scores():
    for name in ["cross_encoder", "qwen3_reranker"]:
        d = EMBEDDINGS / name
        ref = json.loads((d / "reference.json").read_text())
        r = mllm.load_reranker(d, threads=2)
        got = r.rank(ref["query"], ref["documents"], truncate=True)
        assert len(got) == len(ref["scores"])
        for g, w in zip(got, ref["scores"]):
            assert abs(g - w) < 2e-5, (name, got, ref["scores"])
    custom = r.rank(ref["query"], ref["documents"], instruction=ref["custom_instruction"], truncate=True)
    for g, w in zip(custom, ref["custom_scores"]):
        assert abs(g - w) < 2e-5
    with pytest.raises(ValueError, match="more than the 320"):
        r.rank(ref["query"], ref["documents"])
    with pytest.raises(mllm.MllmError, match="not a reranker|\"yes\""):
        mllm.load_reranker(EMBEDDINGS / "qwen3_embedding")
