"""Embeddings through the official `openai` client (issue #30).

Usage: embeddings.py BASE_URL INPUTS_JSON

Embeds the inputs (a JSON list of strings in a file) three ways: the
client's default (it asks for base64 and decodes it), `encoding_format=
"float"`, and `dimensions=64`. Prints one JSON object:
{"base64": [[...]], "float": [[...]], "dim64": [[...]], "usage": N}; the Rust
test compares them with sentence-transformers' reference.
"""

import json
import sys

from openai import OpenAI


def main():
    base, inputs_path = sys.argv[1:]
    inputs = json.load(open(inputs_path))
    client = OpenAI(base_url=base + "/v1", api_key="none")
    default = client.embeddings.create(model="minilm", input=inputs)
    floats = client.embeddings.create(model="minilm", input=inputs, encoding_format="float")
    cut = client.embeddings.create(model="minilm", input=inputs[0], dimensions=64)
    for r in (default, floats):
        assert [d.index for d in r.data] == list(range(len(inputs))), r.data
        assert r.object == "list" and r.model == "minilm"
    print(json.dumps({
        "base64": [list(map(float, d.embedding)) for d in default.data],
        "float": [d.embedding for d in floats.data],
        "dim64": [d.embedding for d in cut.data],
        "usage": default.usage.prompt_tokens,
    }))


if __name__ == "__main__":
    main()
