"""Tool calls through the official `openai` client (issue #28).

Usage: tools.py BASE_URL ROUNDS

A two-tool round trip per round, plain and streamed: a forced call
(`tool_choice: "required"`, one call), its result sent back as a `tool`
turn, a call of the other tool by name, its result, then a final answer
with `tool_choice: "none"`. Forced calls are generated under the tool's
parameter schema, so with any weights every call must come back as
`message.tool_calls` (`finish_reason: "tool_calls"`) whose arguments parse
and validate (`jsonschema`). Streams are put together as OpenAI's
documentation does, from `delta.tool_calls` by index. Also: `auto` answers
either text or valid calls; `client.chat.completions.parse` with a Pydantic
model. Prints the first round's transcript and one line of counts; exits 1
on the first failure.
"""

import json
import sys
from typing import Literal

import jsonschema
from openai import OpenAI
from pydantic import BaseModel, Field

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 8},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 6}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


class Verdict(BaseModel):
    ok: bool
    score: int = Field(ge=0, le=9)
    label: Literal["yes", "no"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def ask(client, messages, stream, seed, **kw):
    """One answer: (content, [(id, name, arguments)], finish_reason)."""
    args = dict(model="m", messages=messages, tools=TOOLS, seed=seed, temperature=1.0, max_tokens=400)
    args.update(kw)
    if not stream:
        r = client.chat.completions.create(**args)
        c = r.choices[0]
        calls = [(t.id, t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        return c.message.content, calls, c.finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **args):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        d = ch.delta
        content += d.content or ""
        for t in d.tool_calls or []:
            slot = calls.setdefault(t.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = t.id or slot["id"]
            if t.function:
                slot["name"] += t.function.name or ""
                slot["arguments"] += t.function.arguments or ""
        finish = ch.finish_reason or finish
    calls = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return content or None, calls, finish


def check_calls(calls, finish, names, where):
    if finish != "tool_calls" or not calls:
        fail(f"{where}: no tool call (finish_reason {finish!r}, calls {calls!r})")
    for cid, name, arguments in calls:
        if not cid or name not in names:
            fail(f"{where}: call {cid!r} of {name!r}, not one of {names}")
        try:
            jsonschema.validate(json.loads(arguments), SCHEMAS[name])
        except Exception as e:  # noqa: BLE001 - any failure is the test's
            fail(f"{where}: arguments {arguments!r} of {name}: {e}")


def assistant_turn(content, calls):
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls],
    }


def round_trip(client, stream, seed, transcript):
    messages = [{"role": "user", "content": "What is the weather in Paris, and the time there?"}]
    where = f"seed {seed} stream={stream}"
    content, calls, finish = ask(client, messages, stream, seed, tool_choice="required", parallel_tool_calls=False)
    check_calls(calls, finish, ["get_weather", "get_time"], where + " required")
    if len(calls) != 1:
        fail(f"{where}: parallel_tool_calls=false gave {len(calls)} calls")
    first = calls[0][1]
    other = "get_time" if first == "get_weather" else "get_weather"
    messages.append(assistant_turn(content, calls))
    messages.append({"role": "tool", "tool_call_id": calls[0][0], "content": json.dumps({"result": "sunny, 21 C" if first == "get_weather" else "14:05"})})
    content, calls2, finish = ask(client, messages, stream, seed + 1, tool_choice={"type": "function", "function": {"name": other}})
    check_calls(calls2, finish, [other], where + " named")
    messages.append(assistant_turn(content, calls2))
    for cid, name, _ in calls2:
        messages.append({"role": "tool", "tool_call_id": cid, "content": json.dumps({"result": "14:05" if name == "get_time" else "sunny"})})
    content, calls3, finish = ask(client, messages, stream, seed + 2, tool_choice="none", max_tokens=24)
    if calls3 or finish not in ("stop", "length") or not isinstance(content, str):
        fail(f"{where}: tool_choice none answered {content!r} {calls3!r} {finish!r}")
    messages.append({"role": "assistant", "content": content})
    if transcript is not None:
        transcript.extend(messages)


def main():
    base, rounds = sys.argv[1], int(sys.argv[2])
    client = OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    transcript = []
    for seed in range(rounds):
        for stream in (False, True):
            round_trip(client, stream, 100 * seed, transcript if seed == 0 and not stream else None)
    print("transcript:", json.dumps(transcript, ensure_ascii=False))
    autos = 0
    for seed in range(rounds):
        content, calls, finish = ask(client, [{"role": "user", "content": "weather in Oslo?"}], False, seed, max_tokens=40)
        if calls:
            check_calls(calls, finish, ["get_weather", "get_time"], f"auto seed {seed}")
            autos += 1
        elif not isinstance(content, str):
            fail(f"auto seed {seed}: neither text nor calls")
    parsed = 0
    for seed in range(rounds):
        r = client.chat.completions.parse(
            model="m", messages=[{"role": "user", "content": "judge"}], response_format=Verdict, seed=seed, temperature=1.0, max_tokens=200
        )
        v = r.choices[0].message.parsed
        if not isinstance(v, Verdict):
            fail(f"parse seed {seed}: {r.choices[0].message.content!r}")
        parsed += 1
    print(f"{rounds}/{rounds} round trips plain and streamed; {autos} auto answers were calls; {parsed}/{rounds} parsed into Verdict")


if __name__ == "__main__":
    main()
