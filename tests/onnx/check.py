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

Target exports (io.json "target"): a "qnn" model is also checked to have
no value of rank above io.json's qnn.max_rank (ONNX shape inference over
every value, which must infer them all). Inputs that io.json lists under
"rope" (rotary tables as inputs) are fed rows `positions` of their table
files, as the host does; positions itself only when the model takes it.
A run with "fake_quant": true applies the QNN quantization overrides to
the weights first (each weight re-quantized with its encodings' scales and
bit width, as qnn-onnx-converter does, then dequantized) and reports the
largest change that made to any weight as "weight_change".
"""

import json
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ONNX_TYPES = {"float32": "tensor(float)", "int64": "tensor(int64)", "int32": "tensor(int32)"}


def check_ranks(path, proto, max_rank):
    """Every value of the graph has a known rank <= max_rank."""
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    g = inferred.graph
    ranks = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            ranks[vi.name] = len(t.shape.dim)
    for t in g.initializer:
        ranks[t.name] = len(t.dims)
    for node in g.node:
        for name in list(node.input) + list(node.output):
            if not name:
                continue
            if name not in ranks:
                sys.exit(f"{path}: no inferred shape for {name} ({node.name}, {node.op_type})")
            if ranks[name] > max_rank:
                sys.exit(f"{path}: {name} ({node.name}, {node.op_type}) has rank "
                         f"{ranks[name]} > {max_rank}")


def fake_quant(model_dir, io):
    """The model with every overridden weight re-quantized by its encoding."""
    proto = onnx.load(f"{model_dir}/model.onnx")
    qnn = io["qnn"]
    with open(f"{model_dir}/{qnn['quantization_overrides']}") as f:
        overrides = json.load(f)
    layouts = {e["name"]: e for e in qnn["encodings"]}
    inits = {t.name: t for t in proto.graph.initializer}
    worst = 0.0
    for enc in overrides["param_encodings"]:
        t = inits[enc["name"]]
        lay = layouts[enc["name"]]
        w = np.moveaxis(numpy_helper.to_array(t).astype(np.float32), lay["channel_axis"], 0)
        n_out, n_in = w.shape
        bw = enc["bw"]
        lo, hi = -(2 ** (bw - 1)), 2 ** (bw - 1) - 1
        if not enc["is_sym"] or any(o != lo for o in enc["offset"]):
            sys.exit(f"{enc['name']}: expected symmetric offsets {lo}")
        s = np.asarray(enc["scale"], np.float32)
        if enc["enc_type"] == "PER_CHANNEL":
            sc = s.reshape(n_out, 1)
        elif enc["enc_type"] == "PER_BLOCK":
            bs = enc["block_size"]
            sc = np.repeat(s.reshape(n_out, n_in // bs), bs, axis=1)
        else:
            sys.exit(f"{enc['name']}: enc_type {enc['enc_type']} not handled")
        q = np.clip(np.round(w / sc), lo, hi)
        wq = (q * sc).astype(np.float32)
        worst = max(worst, float(np.max(np.abs(wq - w))))
        t.CopyFrom(numpy_helper.from_array(np.moveaxis(wq, 0, lay["channel_axis"]).copy(), t.name))
    return proto, worst


def load(model_dir, threads, cache, fq=False):
    if (model_dir, fq) in cache:
        return cache[(model_dir, fq)]
    path = f"{model_dir}/model.onnx"
    with open(f"{model_dir}/io.json") as f:
        io = json.load(f)
    onnx.checker.check_model(path, full_check=True)
    proto = onnx.load(path, load_external_data=False)
    if io.get("target") == "qnn":
        check_ranks(path, proto, io["qnn"]["max_rank"])
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
    change = None
    if fq:
        model, change = fake_quant(model_dir, io)
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    else:
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for kind, declared, actual in (("input", io["inputs"], sess.get_inputs()),
                                   ("output", io["outputs"], sess.get_outputs())):
        got = [(a.name, a.type, list(a.shape)) for a in actual]
        want = [(d["name"], ONNX_TYPES[d["dtype"]], d["shape"]) for d in declared]
        if got != want:
            sys.exit(f"{path}: {kind}s {got} differ from io.json's {want}")
    tables = {}
    for r in io.get("rope", []):
        for key, file in (("cos_input", "cos_file"), ("sin_input", "sin_file")):
            tables[r[key]] = np.fromfile(f"{model_dir}/{r[file]}", dtype="<f4").reshape(
                r["rows"], r["width"])
    cache[(model_dir, fq)] = (sess, io, tables, change)
    return cache[(model_dir, fq)]


def run(job, threads, cache):
    past = {}
    past_len = 0
    logits = []
    times = []
    output = job.get("output", "logits")
    changes = []
    for step in job["steps"]:
        sess, io, tables, change = load(step["model"], threads, cache, job.get("fake_quant", False))
        if change is not None:
            changes.append(change)
        declared = {d["name"]: np.dtype(d["dtype"]) for d in io["inputs"]}
        if "feeds" in step:
            feeds = {}
            for d in io["inputs"]:
                dtype = np.dtype(d["dtype"]).newbyteorder("<")
                feeds[d["name"]] = np.fromfile(step["feeds"][d["name"]], dtype=dtype).reshape(d["shape"])
            out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            logits.append(np.asarray(out[output], dtype=np.float32).reshape(1, -1))
            times.append(0.0)
            continue
        ids = np.asarray(step["ids"], dtype=declared["input_ids"])
        seq = io["seq"]
        if ids.shape != (seq,):
            sys.exit(f"{step['model']} takes {seq} ids per step, the job gave {ids.shape}")
        feeds = {"input_ids": ids}
        positions = np.arange(past_len, past_len + seq)
        for name, table in tables.items():
            feeds[name] = table[positions]
        kv = io.get("kv_cache")
        if kv is not None:
            context = io["context"]
            if past_len + seq > context:
                sys.exit(f"{job['name']}: {past_len} + {seq} rows exceed the context {context}")
            for d in io["inputs"]:
                if d["name"].startswith("past_"):
                    past.setdefault(d["name"], np.zeros(d["shape"], np.float32))
            if "positions" in declared:
                feeds["positions"] = positions.astype(declared["positions"])
            feeds["past_len"] = np.array([past_len], dtype=declared["past_len"])
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
    line = {"name": job["name"], "rows": int(rows.shape[0]),
            "vocab": int(rows.shape[1]), "step_seconds": times}
    if changes:
        line["weight_change"] = max(changes)
    print(json.dumps(line), flush=True)


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
