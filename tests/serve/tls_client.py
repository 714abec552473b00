"""Drives `mllm serve` over TLS with the official `openai` Python client.

Usage: tls_client.py BASE_URL CA_PEM API_KEY
  BASE_URL  e.g. https://127.0.0.1:8443/v1
  CA_PEM    the certificate authority that signed the server's certificate
  API_KEY   a key from the server's --api-key-file

Checks, each as the client's own types and exceptions:
- models and a chat answer (plain and streamed) over HTTP/1.1, trusting
  the CA only (`openai.DefaultHttpxClient(verify=...)`);
- the same over HTTP/2, which the client asks for by ALPN (its HTTP
  client with `http2=True`, PyPI `h2`), and that HTTP/2 is what was spoken;
- a wrong key over TLS is an `AuthenticationError` (401);
- a client that does not trust the CA fails the handshake
  (`APIConnectionError`), so the certificate is really checked;
- plain HTTP to the TLS port gets no answer.
Prints one line per check; exits 1 when any check failed. Run by
cli/tests/serve_security.rs with the venv tests/fetch_assets.sh installs
(.cache/serve-venv).
"""

import ssl
import sys
import traceback

import openai

# The HTTP library the openai client is built on (httpx, or its successor
# httpx2 in newer releases): the TLS options and errors are its own.
try:
    import httpx2 as httpx
except ImportError:
    import httpx

if len(sys.argv) != 4:
    sys.exit(__doc__)
BASE_URL, CA, API_KEY = sys.argv[1:]
CHAT = [{"role": "user", "content": "Describe the weather."}]
failures = []


def check(name):
    def run(f):
        try:
            detail = f()
            print(f"ok   {name}" + (f": {detail}" if detail else ""), flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported
            failures.append(name)
            print(f"FAIL {name}", flush=True)
            traceback.print_exc()
        return f

    return run


def client(key=API_KEY, http2=False, trust_ca=True):
    # Only the test's CA is trusted (the system's otherwise).
    verify = ssl.create_default_context(cafile=CA) if trust_ca else True
    http = openai.DefaultHttpxClient(verify=verify, http2=http2, timeout=120)
    return openai.OpenAI(
        base_url=BASE_URL,
        api_key=key,
        max_retries=0,
        http_client=http,
        _strict_response_validation=True,
    )


def chat_round(c):
    models = c.models.list()
    model = models.data[0].id
    r = c.chat.completions.create(model=model, messages=CHAT, max_tokens=4, temperature=0)
    assert r.choices[0].message.role == "assistant", r
    assert r.usage.completion_tokens >= 1, r.usage
    parts = []
    for chunk in c.chat.completions.create(
        model=model, messages=CHAT, max_tokens=4, temperature=0, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    assert "".join(parts) == r.choices[0].message.content, (parts, r)
    return model, r.choices[0].message.content


@check("HTTP/1.1 over TLS: models, chat, streamed chat")
def _():
    model, text = chat_round(client())
    return f"{model}: {text!r}"


@check("HTTP/2 over TLS (ALPN h2): the same answers")
def _():
    c = client(http2=True)
    model, text = chat_round(c)
    raw = c.chat.completions.with_raw_response.create(
        model=model, messages=CHAT, max_tokens=2, temperature=0
    )
    version = raw.http_response.http_version
    assert version == "HTTP/2", version
    return f"{version}: {text!r}"


@check("a wrong key over TLS is a 401")
def _():
    try:
        client(key="not-the-key").chat.completions.create(
            model="any", messages=CHAT, max_tokens=2
        )
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e
        return str(e.body.get("message", ""))[:60] if isinstance(e.body, dict) else None
    raise AssertionError("a wrong key was accepted")


@check("a client that does not trust the CA fails the handshake")
def _():
    try:
        client(trust_ca=False).models.list()
    except openai.APIConnectionError as e:
        cause = repr(e.__cause__)
        assert "CERTIFICATE_VERIFY_FAILED" in cause or "certificate" in cause.lower(), cause
        return "certificate verify failed"
    raise AssertionError("an untrusted certificate was accepted")


@check("plain HTTP to the TLS port gets no answer")
def _():
    plain = BASE_URL.replace("https://", "http://", 1)
    try:
        r = httpx.get(plain + "/models", timeout=10)
    except httpx.HTTPError as e:
        return type(e).__name__
    raise AssertionError(f"plain HTTP got an answer: {r.status_code}")


if failures:
    print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
    sys.exit(1)
print("all TLS checks passed")
