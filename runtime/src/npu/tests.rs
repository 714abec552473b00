//! The host loop against a scripted graph: what it feeds each step (ids,
//! padding, positions, past_len, the past buffers, rows of the rotary
//! tables of a `--target qnn` export) and where it stores present rows.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::npu::{HostData, NpuResult, PortSpec, PortType, StaticGraph};

use super::io::GraphIo;
use super::{HostLoop, Stage};

/// One layer, 1 head of dim 2, vocab 4, context 8, rope width 1.
fn io(seq: usize) -> GraphIo {
    let json = format!(
        r#"{{"seq": {seq}, "context": 8,
        "inputs": [
          {{"name": "input_ids", "dtype": "int64", "shape": [{seq}]}},
          {{"name": "past_len", "dtype": "int64", "shape": [1]}},
          {{"name": "rope_cos", "dtype": "float32", "shape": [{seq}, 1]}},
          {{"name": "rope_sin", "dtype": "float32", "shape": [{seq}, 1]}},
          {{"name": "past_key.0", "dtype": "float32", "shape": [8, 1, 2]}},
          {{"name": "past_value.0", "dtype": "float32", "shape": [8, 1, 2]}}],
        "outputs": [
          {{"name": "logits", "dtype": "float32", "shape": [{seq}, 4]}},
          {{"name": "present_key.0", "dtype": "float32", "shape": [{seq}, 1, 2]}},
          {{"name": "present_value.0", "dtype": "float32", "shape": [{seq}, 1, 2]}}],
        "kv_cache": {{"layers": [{{"layer": 0, "past_key": "past_key.0", "past_value": "past_value.0",
          "present_key": "present_key.0", "present_value": "present_value.0"}}]}},
        "rope": [{{"cos_input": "rope_cos", "sin_input": "rope_sin", "cos_file": "rope_cos.bin",
          "sin_file": "rope_sin.bin", "rows": 8, "width": 1, "dtype": "float32"}}]}}"#
    );
    GraphIo::parse(&json, "io.json").expect("valid io.json")
}

/// What one step was fed.
#[derive(Debug, PartialEq)]
struct Fed {
    ids: Vec<i64>,
    past_len: i64,
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Rows 0..past_len of past_key.0 (first value of each row).
    keys: Vec<f32>,
}

/// Present key rows = 10 * id + (its slot); logits one-hot at id + 1.
struct Scripted {
    seq: usize,
    log: Rc<RefCell<Vec<Fed>>>,
}

impl StaticGraph for Scripted {
    fn label(&self) -> String {
        format!("scripted {}", self.seq)
    }

    fn run(
        &mut self,
        inputs: &[(&str, HostData)],
        outputs: &mut [(&str, &mut [f32])],
    ) -> NpuResult<()> {
        let get = |n: &str| inputs.iter().find(|(k, _)| *k == n).map(|(_, d)| *d);
        let (
            Some(HostData::I64(ids)),
            Some(HostData::I64(p)),
            Some(HostData::F32(cos)),
            Some(HostData::F32(sin)),
            Some(HostData::F32(keys)),
        ) = (
            get("input_ids"),
            get("past_len"),
            get("rope_cos"),
            get("rope_sin"),
            get("past_key.0"),
        )
        else {
            panic!(
                "inputs missing: {:?}",
                inputs.iter().map(|(n, _)| *n).collect::<Vec<_>>()
            );
        };
        self.log.borrow_mut().push(Fed {
            ids: ids.to_vec(),
            past_len: p[0],
            cos: cos.to_vec(),
            sin: sin.to_vec(),
            keys: keys.chunks(2).take(p[0] as usize).map(|r| r[0]).collect(),
        });
        for (name, buf) in outputs.iter_mut() {
            buf.fill(0.0);
            for (i, &id) in ids.iter().enumerate() {
                match *name {
                    "logits" => buf[i * 4 + (id as usize + 1) % 4] = 1.0,
                    _ => buf[i * 2] = 10.0 * id as f32 + i as f32,
                }
            }
        }
        Ok(())
    }
}

fn table(dir: &std::path::Path, name: &str, scale: f32) {
    let v: Vec<u8> = (0..8)
        .flat_map(|i| (i as f32 * scale).to_le_bytes())
        .collect();
    std::fs::write(dir.join(name), v).expect("write table");
}

#[test]
fn host_loop_feeds_rope_rows_and_stores_present_rows() {
    let dir = std::env::temp_dir().join(format!("mllm-npu-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    table(&dir, "rope_cos.bin", 1.0);
    table(&dir, "rope_sin.bin", -1.0);
    let log = Rc::new(RefCell::new(vec![]));
    let stage = |seq: usize| {
        let g = Scripted {
            seq,
            log: log.clone(),
        };
        Stage::with_tables(Box::new(g), io(seq), &dir).expect("tables")
    };
    let mut host = HostLoop::new(Some(stage(3)), stage(1)).expect("host");
    host.pad_id = 9;
    // 5 tokens: a full chunk, then 2 padded to 3; then one decode step.
    let logits = host.feed(&[1, 2, 3, 0, 2]).expect("prompt");
    assert_eq!(
        logits,
        [0.0, 0.0, 0.0, 1.0],
        "logits of the last real token"
    );
    host.feed(&[3]).expect("decode");
    let fed = log.borrow();
    assert_eq!(
        fed[0],
        Fed {
            ids: vec![1, 2, 3],
            past_len: 0,
            cos: vec![0.0, 1.0, 2.0],
            sin: vec![-0.0, -1.0, -2.0],
            keys: vec![]
        }
    );
    assert_eq!(
        fed[1],
        Fed {
            ids: vec![0, 2, 9],
            past_len: 3,
            cos: vec![3.0, 4.0, 5.0],
            sin: vec![-3.0, -4.0, -5.0],
            keys: vec![10.0, 21.0, 32.0]
        }
    );
    assert_eq!(
        fed[2],
        Fed {
            ids: vec![3],
            past_len: 5,
            cos: vec![5.0],
            sin: vec![-5.0],
            keys: vec![10.0, 21.0, 32.0, 0.0, 21.0]
        }
    );
    assert_eq!(host.past_len(), 6);
    assert_eq!(host.tokens, [1, 2, 3, 0, 2, 3]);
    let e = host.feed(&[1, 1, 1]).unwrap_err();
    assert!(e.message().contains("do not fit"), "{e}");
    host.reset();
    assert_eq!(host.past_len(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn io_json_is_checked_before_anything_runs() {
    let ok = io(1);
    assert_eq!(
        (ok.seq, ok.context, ok.vocab, ok.layers.len()),
        (1, 8, 4, 1)
    );
    let spec = |name: &str| PortSpec {
        name: name.into(),
        dtype: PortType::F32,
        shape: vec![1, 1],
    };
    assert_eq!(ok.input("rope_cos"), Some(&spec("rope_cos")));
    let bad = r#"{"seq": 2, "format": "onnx", "inputs": [], "outputs": []}"#;
    let e = GraphIo::parse(bad, "x/io.json").unwrap_err();
    assert!(
        e.contains("--no-cache") && e.starts_with("x/io.json"),
        "{e}"
    );
    let odd = r#"{"seq": 1, "context": 4, "kv_cache": {"layers": []},
        "inputs": [{"name": "input_ids", "dtype": "int32", "shape": [1]}], "outputs": []}"#;
    let e = GraphIo::parse(odd, "io.json").unwrap_err();
    assert!(e.contains("int32"), "{e}");
}
