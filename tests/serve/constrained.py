"""Answers under a JSON schema always parse and validate (issue #28).

Usage: constrained.py BASE_URL N [--with-object]

Sends N chat requests per schema to a running `mllm serve` (a different
seed and temperature 1 each, so a random-weight model wanders through the
whole language the schema allows), parses every answer and validates it
with the `jsonschema` package. Every answer must end by itself
(finish_reason "stop": the schemas bound every string, array and number,
so a whole answer fits in max_tokens) and validate. `--with-object` adds
`{"type": "json_object"}`, whose strings and nesting are unbounded: for real
weights, which close their strings, sampled as `mllm run` samples by default
(temperature 1 over the whole vocabulary rambles on past any limit). A
sampled object may still nest on past max_tokens (a 135M model describing a
person's "aliens" within aliens): such an answer is cut, not invalid, so it
is reported and skipped, and at least half of the json_object answers must
end by themselves. Prints one line of counts per schema; exits 1 on the
first failure, with the answer.
"""

import json
import sys
import urllib.request

import jsonschema

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 1, "maxLength": 6},
                    "zip": {"type": "integer", "minimum": 0, "maximum": 99999},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "bounded_array": {
        "type": "array",
        "items": {"type": "integer", "minimum": -5, "maximum": 5},
        "minItems": 1,
        "maxItems": 4,
    },
    "enum_optional_number": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "number", "minimum": 0, "maximum": 10},
            "note": {"type": "string", "maxLength": 5},
        },
        "required": ["color"],
        "additionalProperties": False,
    },
    "any_of": {
        "anyOf": [
            {"type": "boolean"},
            {"type": "null"},
            {
                "type": "object",
                "properties": {"k": {"type": "string", "maxLength": 4}},
                "required": ["k"],
                "additionalProperties": False,
            },
        ]
    },
}


def ask(base, body):
    req = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    base, n = sys.argv[1], int(sys.argv[2])
    cases = [
        (name, {"type": "json_schema", "json_schema": {"name": name, "schema": s, "strict": True}}, s)
        for name, s in SCHEMAS.items()
    ]
    wander = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    cases = [(name, fmt, schema, wander, f"Reply with JSON for case {name}.") for name, fmt, schema in cases]
    if "--with-object" in sys.argv:
        ask_person = "Describe a fictional person as a JSON object with their name, age and city."
        cases.append(("json_object", {"type": "json_object"}, {"type": "object"}, {"temperature": 0.8}, ask_person))
    for name, fmt, schema, sampling, prompt in cases:
        valid = 0
        for seed in range(n):
            r = ask(
                base,
                {
                    "messages": [{"role": "user", "content": prompt}],
                    "response_format": fmt,
                    **sampling,
                    "seed": seed,
                    "max_tokens": 400,
                },
            )
            choice = r["choices"][0]
            text = choice["message"]["content"]
            if choice["finish_reason"] != "stop":
                print(f"{name} seed {seed}: did not end by itself ({choice['finish_reason']}): {text!r}")
                if name == "json_object" and choice["finish_reason"] == "length":
                    continue
                sys.exit(1)
            try:
                jsonschema.validate(json.loads(text), schema)
            except (ValueError, jsonschema.ValidationError) as e:
                print(f"{name} seed {seed}: {text!r} is not valid: {e}")
                sys.exit(1)
            valid += 1
        print(f"{name}: {valid}/{n} answers parse and validate")
        if name == "json_object" and 2 * valid < n:
            print(f"{name}: fewer than half of the answers ended by themselves")
            sys.exit(1)


if __name__ == "__main__":
    main()
