"""Drives `mllm serve` with the official `openai` Python client.

Usage: openai_client.py BASE_URL MODEL API_KEY
  BASE_URL  e.g. http://127.0.0.1:8080/v1
  MODEL     the served model's id, e.g. SmolLM2-135M-Instruct.Q4_1
  API_KEY   the key the server was started with (--api-key)

Checks models, chat (plain, streamed, with logprobs), completions (plain,
streamed, with logprobs), concurrent requests and the errors a client
sees (n > 1, a wrong key), and that any model name is served when
one model is loaded, as the client's own types and
exceptions. Responses are validated against the client's pydantic models
(`_strict_response_validation`), so a missing or mistyped field fails.
Prints one line per check; exits 1 when any check failed. Run by
cli/tests/serve_openai.rs with the venv tests/fetch_assets.sh installs
(.cache/serve-venv).
"""

import sys
import threading
import traceback

import openai

if len(sys.argv) != 4:
    sys.exit(__doc__)
BASE_URL, MODEL, API_KEY = sys.argv[1:]

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"
MAX_TOKENS = 12


def client(key=API_KEY, strict=True):
    # No retries: a failure shows at once, not after back-offs.
    return openai.OpenAI(
        base_url=BASE_URL,
        api_key=key,
        max_retries=0,
        timeout=300,
        _strict_response_validation=strict,
    )


C = client()
# The SDK types a completions stream's chunks as `Completion`, whose
# `finish_reason` may not be null, yet OpenAI itself sends null until the
# last chunk (openai/openai-openapi#100): that stream is read unvalidated.
C_LAX = client(strict=False)
failures = []
# Results later checks compare with.
seen = {}


def check(name):
    def run(f):
        try:
            detail = f()
            print(f"ok   {name}" + (f": {detail}" if detail else ""), flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
        return f

    return run


def check_usage(usage, finish_reason, max_tokens):
    assert usage is not None, "no usage"
    assert usage.prompt_tokens > 0, usage
    assert 1 <= usage.completion_tokens <= max_tokens, usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage
    if finish_reason == "length":
        assert usage.completion_tokens == max_tokens, usage


@check("models.list contains the model")
def _():
    ids = [m.id for m in C.models.list()]
    assert MODEL in ids, f"{MODEL!r} not in {ids}"
    return f"{ids}"


@check("chat.completions.create")
def _():
    r = C.chat.completions.create(
        model=MODEL, messages=CHAT, temperature=0, max_tokens=MAX_TOKENS
    )
    assert r.object == "chat.completion", r.object
    assert r.model == MODEL, r.model
    assert r.id, "empty id"
    assert len(r.choices) == 1, r.choices
    ch = r.choices[0]
    assert ch.index == 0, ch.index
    assert ch.message.role == "assistant", ch.message.role
    assert isinstance(ch.message.content, str) and ch.message.content, ch.message
    assert ch.finish_reason in ("stop", "length"), ch.finish_reason
    assert ch.logprobs is None, ch.logprobs
    check_usage(r.usage, ch.finish_reason, MAX_TOKENS)
    seen["chat"] = r
    return f"{ch.message.content!r} ({ch.finish_reason}, {r.usage.completion_tokens} tokens)"


@check("chat.completions.create stream=True include_usage")
def _():
    stream = C.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks, "no chunks"
    ids = {c.id for c in chunks}
    assert len(ids) == 1, f"ids {ids}"
    content, finish, usage_chunks = "", None, []
    for c in chunks:
        assert c.object == "chat.completion.chunk", c.object
        assert c.model == MODEL, c.model
        if c.usage is not None:
            usage_chunks.append(c)
        for ch in c.choices:
            content += ch.delta.content or ""
            if ch.finish_reason is not None:
                assert finish is None, "two finish reasons"
                finish = ch.finish_reason
    assert chunks[0].choices and chunks[0].choices[0].delta.role == "assistant", chunks[0]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1], "one usage chunk, last"
    assert chunks[-1].choices == [], chunks[-1].choices
    assert finish in ("stop", "length"), finish
    usage = chunks[-1].usage
    check_usage(usage, finish, MAX_TOKENS)
    ref = seen.get("chat")
    assert ref is not None, "no non-streaming answer to compare with"
    want = ref.choices[0].message.content
    assert content == want, f"{content!r} != {want!r}"
    assert finish == ref.choices[0].finish_reason, f"{finish} != {ref.choices[0].finish_reason}"
    assert usage.prompt_tokens == ref.usage.prompt_tokens, (usage, ref.usage)
    assert usage.completion_tokens == ref.usage.completion_tokens, (usage, ref.usage)
    return f"{len(chunks)} chunks, text equals the plain answer"


@check("chat.completions.create logprobs=True top_logprobs=2")
def _():
    r = C.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        temperature=0,
        max_tokens=MAX_TOKENS,
        logprobs=True,
        top_logprobs=2,
    )
    ch = r.choices[0]
    assert ch.logprobs is not None and ch.logprobs.content, ch.logprobs
    entries = ch.logprobs.content
    assert len(entries) == r.usage.completion_tokens, (len(entries), r.usage)
    for e in entries:
        assert isinstance(e.token, str), e
        assert e.logprob <= 0, e
        assert e.bytes is None or bytes(e.bytes) == e.token.encode(), e
        assert len(e.top_logprobs) == 2, e.top_logprobs
        assert all(t.logprob <= 0 for t in e.top_logprobs), e.top_logprobs
        # Greedy: the chosen token is the most likely one.
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob, e.top_logprobs
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-3, (e.logprob, e.top_logprobs)
    assert "".join(e.token for e in entries) == ch.message.content, (entries, ch.message.content)
    ref = seen.get("chat")
    if ref is not None:
        assert ch.message.content == ref.choices[0].message.content, "logprobs changed the answer"
    seen["chat_logprobs"] = entries
    return f"{len(entries)} entries"


@check("chat.completions.create stream=True logprobs=True top_logprobs=2")
def _():
    stream = C.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        temperature=0,
        max_tokens=MAX_TOKENS,
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    entries = []
    for c in stream:
        assert c.usage is None, "usage without include_usage"
        for ch in c.choices:
            if ch.logprobs is not None and ch.logprobs.content:
                entries.extend(ch.logprobs.content)
    ref = seen.get("chat_logprobs")
    assert ref is not None, "no non-streaming logprobs to compare with"
    assert [e.token for e in entries] == [e.token for e in ref], (entries, ref)
    for a, b in zip(entries, ref):
        assert abs(a.logprob - b.logprob) < 1e-4, (a, b)
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs], (a, b)
    return f"{len(entries)} entries, equal to the plain answer's"


@check("completions.create")
def _():
    r = C.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=MAX_TOKENS)
    assert r.object == "text_completion", r.object
    assert r.model == MODEL, r.model
    assert len(r.choices) == 1, r.choices
    ch = r.choices[0]
    assert isinstance(ch.text, str) and ch.text, ch
    assert ch.finish_reason in ("stop", "length"), ch.finish_reason
    assert ch.logprobs is None, ch.logprobs
    check_usage(r.usage, ch.finish_reason, MAX_TOKENS)
    seen["completion"] = r
    return f"{ch.text!r} ({ch.finish_reason})"


@check("completions.create stream=True include_usage")
def _():
    stream = C_LAX.completions.create(
        model=MODEL,
        prompt=PROMPT,
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len({c.id for c in chunks}) == 1, "one id per stream"
    text, finish = "", None
    for c in chunks:
        assert c.object == "text_completion", c.object
        assert c.model == MODEL, c.model
        for ch in c.choices:
            assert isinstance(ch.text, str), ch
            text += ch.text
            if ch.finish_reason is not None:
                assert finish is None, "two finish reasons"
                finish = ch.finish_reason
    assert finish in ("stop", "length"), finish
    assert chunks[-1].usage is not None and chunks[-1].choices == [], chunks[-1]
    ref = seen.get("completion")
    assert ref is not None, "no non-streaming answer to compare with"
    assert text == ref.choices[0].text, f"{text!r} != {ref.choices[0].text!r}"
    assert finish == ref.choices[0].finish_reason, (finish, ref.choices[0].finish_reason)
    usage = chunks[-1].usage
    assert usage.completion_tokens == ref.usage.completion_tokens, (usage, ref.usage)
    assert usage.prompt_tokens == ref.usage.prompt_tokens, (usage, ref.usage)
    return f"{len(chunks)} chunks, text equals the plain answer"


@check("completions.create logprobs=2")
def _():
    r = C.completions.create(
        model=MODEL, prompt=PROMPT, temperature=0, max_tokens=MAX_TOKENS, logprobs=2
    )
    ch = r.choices[0]
    lp = ch.logprobs
    assert lp is not None and lp.token_logprobs, lp
    n = r.usage.completion_tokens
    assert len(lp.token_logprobs) == n, (lp.token_logprobs, r.usage)
    assert len(lp.tokens) == n and len(lp.text_offset) == n and len(lp.top_logprobs) == n, lp
    assert all(x <= 0 for x in lp.token_logprobs), lp.token_logprobs
    assert all(len(t) == 2 for t in lp.top_logprobs), lp.top_logprobs
    assert "".join(lp.tokens) == ch.text, (lp.tokens, ch.text)
    assert lp.text_offset[0] == 0, lp.text_offset
    ref = seen.get("completion")
    if ref is not None:
        assert ch.text == ref.choices[0].text, "logprobs changed the answer"
    return f"{n} token_logprobs"


@check("two concurrent chats answer as one alone")
def _():
    ref = seen.get("chat")
    assert ref is not None, "no non-streaming answer to compare with"
    out = [None, None]

    def go(i):
        try:
            r = C.chat.completions.create(
                model=MODEL, messages=CHAT, temperature=0, max_tokens=MAX_TOKENS
            )
            out[i] = r.choices[0].message.content
        except Exception as e:  # noqa: BLE001
            out[i] = e

    ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    want = ref.choices[0].message.content
    assert out == [want, want], f"{out} != {want!r} twice"


def expect(exc, status, f):
    try:
        f()
    except exc as e:
        assert e.status_code == status, e.status_code
        body = e.body
        assert isinstance(body, dict) and isinstance(body.get("message"), str), body
        assert body.get("type"), body
        return f"{exc.__name__} {status}: {e.message}"
    raise AssertionError(f"no {exc.__name__} raised")


@check("with one model loaded, any model name is served by it")
def _():
    r = C.chat.completions.create(model="gpt-4o-mini", messages=CHAT, max_tokens=2)
    assert r.model == MODEL, r.model
    return f"gpt-4o-mini -> {r.model}"


@check("n=2 raises BadRequestError")
def _():
    return expect(
        openai.BadRequestError,
        400,
        lambda: C.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4, n=2),
    )


@check("a wrong API key raises AuthenticationError")
def _():
    bad = client("not-the-key")
    # The model list is open without a key, as llama-server's.
    assert [m.id for m in bad.models.list().data] == [MODEL]
    return expect(
        openai.AuthenticationError,
        401,
        lambda: bad.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4),
    )


if failures:
    print(f"{len(failures)} check(s) failed: {', '.join(failures)}", flush=True)
    sys.exit(1)
print("all checks passed", flush=True)
