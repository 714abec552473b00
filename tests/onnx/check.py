"""Runs exported mllm ONNX graphs with onnxruntime, as a host would.

Usage: python check.py JOBS.json

JOBS.json: {"threads": 2, "runs": [{"name": str, "out": path,
            "steps": [{"model": dir, "ids": [int, ...]}, ...],
            "repeat": int (optional: time each step this many times),
            "output": name (optional, default "logits")}]}

A step may give "feeds": {input name: raw file} instead of "ids": each
input is then read from its file (little-endian, in the input's dtype and
shape from io.json) and nothing else is fed (single-op graphs).

Each run feeds its steps in order. A graph without KV I/O (io.json has no
"kv_cache") takes only input_ids. A graph with it gets positions
past_len..past_len+seq, past_len and the past buffers (zeros at first);
after the step the present rows are copied into rows past_len.. of the
buffers and past_len grows by seq, as io.json's "kv_cache.host" says.
The logits of every step are concatenated and written to "out" as raw
little-endian float32 [rows, vocab]. Every model is first checked with
onnx.checker (full check, with shape inference) and its declared inputs
and outputs compared with its io.json. One JSON line per run goes to
stdout: {"name", "rows", "step_seconds": [median seconds per step]}.
Exits non-zero with a message on any failure.
"""

import json
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

ONNX_TYPES = {"float32": "tensor(float)", "int64": "tensor(int64)", "int32": "tensor(int32)"}


def load(model_dir, threads, cache):
    if model_dir in cache:
        return cache[model_dir]
    path = f"{model_dir}/model.onnx"
    with open(f"{model_dir}/io.json") as f:
        io = json.load(f)
    onnx.checker.check_model(path, full_check=True)
    proto = onnx.load(path, load_external_data=False)
    imported = {o.domain for o in proto.opset_import}
    for node in proto.graph.node:
        if node.domain not in imported:
            sys.exit(f"{path}: node {node.name} ({node.op_type}) is in domain "
                     f"'{node.domain}', which the model does not import")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # onnxruntime fuses int4 DequantizeLinear + MatMul into MatMulNBits and
    # by default rounds its activations to int8 (accuracy level 4); level 1
    # keeps them float32, so the check measures the export, not that choice.
    opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for kind, declared, actual in (("input", io["inputs"], sess.get_inputs()),
                                   ("output", io["outputs"], sess.get_outputs())):
        got = [(a.name, a.type, list(a.shape)) for a in actual]
        want = [(d["name"], ONNX_TYPES[d["dtype"]], d["shape"]) for d in declared]
        if got != want:
            sys.exit(f"{path}: {kind}s {got} differ from io.json's {want}")
    cache[model_dir] = (sess, io)
    return cache[model_dir]


def run(job, threads, cache):
    past = {}
    past_len = 0
    logits = []
    times = []
    output = job.get("output", "logits")
    for step in job["steps"]:
        sess, io = load(step["model"], threads, cache)
        if "feeds" in step:
            feeds = {}
            for d in io["inputs"]:
                dtype = np.dtype(d["dtype"]).newbyteorder("<")
                feeds[d["name"]] = np.fromfile(step["feeds"][d["name"]], dtype=dtype).reshape(d["shape"])
            out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            logits.append(np.asarray(out[output], dtype=np.float32).reshape(1, -1))
            times.append(0.0)
            continue
        ids = np.asarray(step["ids"], dtype=np.int64)
        seq = io["seq"]
        if ids.shape != (seq,):
            sys.exit(f"{step['model']} takes {seq} ids per step, the job gave {ids.shape}")
        feeds = {"input_ids": ids}
        kv = io.get("kv_cache")
        if kv is not None:
            context = io["context"]
            if past_len + seq > context:
                sys.exit(f"{job['name']}: {past_len} + {seq} rows exceed the context {context}")
            for d in io["inputs"]:
                if d["name"].startswith("past_"):
                    past.setdefault(d["name"], np.zeros(d["shape"], np.float32))
            feeds["positions"] = np.arange(past_len, past_len + seq, dtype=np.int64)
            feeds["past_len"] = np.array([past_len], dtype=np.int64)
            for layer in kv["layers"]:
                feeds[layer["past_key"]] = past[layer["past_key"]]
                feeds[layer["past_value"]] = past[layer["past_value"]]
        names = [o.name for o in sess.get_outputs()]
        spent = []
        for _ in range(max(1, job.get("repeat", 1))):
            t0 = time.perf_counter()
            out = dict(zip(names, sess.run(None, feeds)))
            spent.append(time.perf_counter() - t0)
        times.append(float(np.median(spent)))
        logits.append(out[output])
        if kv is not None:
            for layer in kv["layers"]:
                for p, q in (("past_key", "present_key"), ("past_value", "present_value")):
                    past[layer[p]][past_len:past_len + seq] = out[layer[q]]
            past_len += seq
    rows = np.concatenate(logits, axis=0).astype("<f4")
    rows.tofile(job["out"])
    print(json.dumps({"name": job["name"], "rows": int(rows.shape[0]),
                      "vocab": int(rows.shape[1]), "step_seconds": times}), flush=True)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    cache = {}
    for job in jobs["runs"]:
        try:
            run(job, jobs.get("threads", 2), cache)
        except Exception as e:  # name the run and graph that failed
            models = sorted({s["model"] for s in job["steps"]})
            sys.exit(f"run '{job['name']}' ({', '.join(models)}): {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
