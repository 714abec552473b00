//! Embeddings and reranking through the C ABI, called as C would call
//! them, against sentence-transformers' outputs of the tiny fixtures
//! (tests/fixtures/embeddings): a Qwen3-Embedding layout and the BERT and
//! Qwen3 rerankers; then the errors.

mod common;

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use common::root;
use mllm::ffi::*;
use mllm::Status;
use serde_json::Value;

fn last_error() -> String {
    unsafe { CStr::from_ptr(mllm_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn fixture(name: &str) -> std::path::PathBuf {
    root().join("tests/fixtures/embeddings").join(name)
}

fn meta(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("json")
}

fn c_strings(v: &Value) -> (Vec<CString>, Vec<*const c_char>) {
    let owned: Vec<CString> = v
        .as_array()
        .expect("list")
        .iter()
        .map(|s| CString::new(s.as_str().expect("string")).expect("nul"))
        .collect();
    let ptrs = owned.iter().map(|c| c.as_ptr()).collect();
    (owned, ptrs)
}

/// The rows of an f32 [n, d] tensor of a safetensors file.
fn f32_rows(path: &std::path::Path, name: &str) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let t = &header[name];
    let cols = t["shape"][1].as_u64().expect("cols") as usize;
    let start = 8 + n + t["data_offsets"][0].as_u64().expect("start") as usize;
    let end = 8 + n + t["data_offsets"][1].as_u64().expect("end") as usize;
    let vals: Vec<f32> = bytes[start..end]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    vals.chunks(cols).map(<[f32]>::to_vec).collect()
}

#[test]
fn embeddings_through_the_c_abi() {
    let path = CString::new(fixture("qwen3_embedding").to_str().expect("utf-8")).expect("path");
    let mut e = null_mut();
    assert_eq!(
        unsafe { mllm_embedder_load(path.as_ptr(), null(), &mut e) },
        Status::Ok,
        "{}",
        last_error()
    );
    let dim = unsafe { mllm_embedder_dimension(e) };
    assert_eq!(dim, 32);
    let m = meta("qwen3_embedding");
    let (_owned, texts) = c_strings(&m["inputs"]);
    let mut out = vec![0.0f32; texts.len() * dim];
    let st = unsafe {
        mllm_embed(
            e,
            texts.as_ptr(),
            texts.len(),
            -1,
            false,
            out.as_mut_ptr(),
            out.len(),
        )
    };
    assert_eq!(st, Status::Ok, "{}", last_error());
    let want = f32_rows(
        &fixture("qwen3_embedding").join("reference.safetensors"),
        "plain",
    );
    for (i, (got, want)) in out.chunks(dim).zip(&want).enumerate() {
        let dot: f32 = got.iter().zip(want).map(|(a, b)| a * b).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let cos = dot / (norm(got) * norm(want));
        assert!(cos >= 0.9999, "input {i}: cosine {cos}");
    }
    // A buffer too small, a bad normalize, NULLs: errors that say which.
    let st = unsafe {
        mllm_embed(
            e,
            texts.as_ptr(),
            texts.len(),
            -1,
            false,
            out.as_mut_ptr(),
            dim,
        )
    };
    assert_eq!(st, Status::InvalidArgument);
    assert!(last_error().contains("need"), "{}", last_error());
    let st = unsafe { mllm_embed(e, texts.as_ptr(), 1, 2, false, out.as_mut_ptr(), out.len()) };
    assert_eq!(st, Status::InvalidArgument);
    assert!(last_error().contains("normalize"), "{}", last_error());
    let st = unsafe {
        mllm_embed(
            null(),
            texts.as_ptr(),
            1,
            -1,
            false,
            out.as_mut_ptr(),
            out.len(),
        )
    };
    assert_eq!(st, Status::InvalidArgument);
    unsafe { mllm_embedder_free(e) };
    let missing = CString::new("/no/such/model").expect("path");
    let st = unsafe { mllm_embedder_load(missing.as_ptr(), null(), &mut e) };
    assert_eq!(st, Status::NotFound);
    assert!(e.is_null());
}

#[test]
fn reranking_through_the_c_abi() {
    for name in ["cross_encoder", "qwen3_reranker"] {
        let path = CString::new(fixture(name).to_str().expect("utf-8")).expect("path");
        let mut r = null_mut();
        let st = unsafe { mllm_reranker_load(path.as_ptr(), null(), &mut r) };
        assert_eq!(st, Status::Ok, "{name}: {}", last_error());
        let m = meta(name);
        let query = CString::new(m["query"].as_str().expect("query")).expect("nul");
        let (_owned, docs) = c_strings(&m["documents"]);
        let mut scores = vec![0.0f32; docs.len()];
        let st = unsafe {
            mllm_rank(
                r,
                query.as_ptr(),
                docs.as_ptr(),
                docs.len(),
                null(),
                true,
                scores.as_mut_ptr(),
            )
        };
        assert_eq!(st, Status::Ok, "{name}: {}", last_error());
        for (i, (g, w)) in scores
            .iter()
            .zip(m["scores"].as_array().expect("scores"))
            .enumerate()
        {
            let w = w.as_f64().expect("score") as f32;
            assert!((g - w).abs() < 2e-5, "{name}: document {i}: {g} vs {w}");
        }
        let st = unsafe {
            mllm_rank(
                r,
                query.as_ptr(),
                docs.as_ptr(),
                docs.len(),
                null(),
                true,
                null_mut(),
            )
        };
        assert_eq!(st, Status::InvalidArgument);
        unsafe { mllm_reranker_free(r) };
    }
    // An embedding model whose vocabulary has no "yes"/"no" is no reranker.
    let path = CString::new(fixture("qwen3_embedding").to_str().expect("utf-8")).expect("path");
    let mut r = null_mut();
    let st = unsafe { mllm_reranker_load(path.as_ptr(), null(), &mut r) };
    assert_eq!(st, Status::Load);
    assert!(last_error().contains("\"yes\""), "{}", last_error());
}
