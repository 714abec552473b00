//! Hand-built GGUF files (`Builder`, a minimal GGUF writer): tensor types
//! the gguf-py fixtures lack (BF16, I32, K-quants), and corrupt, truncated
//! and hostile files, each of which must be refused with a `ConvertError`
//! naming the file and the problem, never a panic or a huge allocation.
//! The proptest mutates and truncates the gguf-py fixture.

use std::path::PathBuf;

use mllm_backends::weights::WeightSource;
use mllm_backends::DType;
use mllm_converter::gguf::{hf_config, GgufFile, GgufWeights};
use mllm_converter::ConvertError;
use proptest::prelude::*;

const U32: u32 = 4;
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// A minimal GGUF writer for crafting files gguf-py would refuse to write.
struct Builder {
    version: u32,
    n_kv: u64,
    kv: Vec<u8>,
    n_tensors: u64,
    infos: Vec<u8>,
    data: Vec<u8>,
    alignment: usize,
}

fn gstr(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

impl Builder {
    fn new() -> Builder {
        Builder {
            version: 3,
            n_kv: 0,
            kv: vec![],
            n_tensors: 0,
            infos: vec![],
            data: vec![],
            alignment: 32,
        }
        .kv("general.architecture", STRING, &gstr("llama"))
    }

    fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> Builder {
        self.n_kv += 1;
        self.kv.extend(gstr(key));
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self
    }

    fn u32(self, key: &str, v: u32) -> Builder {
        self.kv(key, U32, &v.to_le_bytes())
    }

    /// A tensor info with dims in ggml order (innermost first).
    fn info(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Builder {
        self.n_tensors += 1;
        self.infos.extend(gstr(name));
        self.infos.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| self.infos.extend(d.to_le_bytes()));
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self
    }

    /// A tensor info plus its data, placed at the next aligned offset.
    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, data: &[u8]) -> Builder {
        let off = self.data.len().next_multiple_of(self.alignment);
        self.data.resize(off, 0);
        self.data.extend_from_slice(data);
        self.info(name, dims, ty, off as u64)
    }

    fn build(&self) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(self.version.to_le_bytes());
        b.extend(self.n_tensors.to_le_bytes());
        b.extend(self.n_kv.to_le_bytes());
        b.extend(&self.kv);
        b.extend(&self.infos);
        b.resize(b.len().next_multiple_of(self.alignment), 0);
        b.extend(&self.data);
        b
    }
}

fn open(bytes: Vec<u8>) -> Result<GgufFile, ConvertError> {
    GgufFile::from_bytes("bad.gguf", bytes)
}

/// Asserts `bytes` are refused with a message naming the file and `what`.
#[track_caller]
fn refused(bytes: Vec<u8>, what: &str) -> ConvertError {
    let e = open(bytes).expect_err(what);
    let m = e.to_string();
    assert!(m.contains("bad.gguf"), "no file name in: {m}");
    assert!(m.contains(what), "expected `{what}` in: {m}");
    e
}

fn f32_bytes(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

#[test]
fn the_builder_makes_valid_files() {
    let b = Builder::new().u32("general.alignment", 64).tensor(
        "token_embd.weight",
        &[4, 2],
        0,
        &f32_bytes(8),
    );
    let b = Builder { alignment: 64, ..b };
    let g = open(b.build()).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.tensor_infos()[0].shape, [2, 4]);
    let w = GgufWeights::new(g).unwrap();
    let t = w.load("model.embed_tokens.weight").unwrap();
    assert_eq!(t.to_f32_vec().unwrap(), [0., 1., 2., 3., 4., 5., 6., 7.]);
}

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gguf")
        .join(name);
    std::fs::read(p).unwrap()
}

#[test]
fn bf16_i32_and_k_quant_tensors_load() {
    let bf16: Vec<u8> = [1.5f32, -2.0, 0.25]
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    let i32s: Vec<u8> = [7i32, -9].iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut b = Builder::new()
        .tensor("output_norm.weight", &[3], 30, &bf16)
        .tensor("ids", &[2], 26, &i32s);
    for (ty, id) in [("Q4_K", 12), ("Q5_K", 13), ("Q6_K", 14)] {
        // 3 blocks of 256 as a [3, 256] matrix.
        let blocks = fixture(&format!("quant/{ty}.blocks"));
        b = b.tensor(&format!("blk.0.{ty}.weight"), &[256, 3], id, &blocks);
    }
    let w = GgufWeights::new(open(b.build()).unwrap()).unwrap();
    let t = w.load("model.norm.weight").unwrap();
    assert_eq!(t.dtype(), DType::BF16);
    assert_eq!(t.to_f32_vec().unwrap(), [1.5, -2.0, 0.25]);
    let t = w.load("ids").unwrap();
    assert_eq!(
        t.i32s().unwrap(),
        [7, -9],
        "names outside the table stay as they are"
    );
    let id_of = |ty: &str| match ty {
        "Q4_K" => 12,
        "Q5_K" => 13,
        _ => 14,
    };
    for ty in ["Q4_K", "Q5_K", "Q6_K"] {
        let name = format!("blk.0.{ty}.weight");
        let q = mllm_backends::quant::QuantType::from_ggml_type_id(id_of(ty)).unwrap();
        assert_eq!(
            w.info(&name).unwrap().dtype,
            DType::Quant(q),
            "blocks by default"
        );
        let t = w.load(&name).unwrap();
        assert_eq!(t.dtype(), DType::Quant(q));
        assert_eq!(t.shape(), [3, 256]);
        let want: Vec<f32> = fixture(&format!("quant/{ty}.dequant"))
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(t.to_f32_vec().unwrap(), want, "{ty}");
    }
}

#[test]
fn bad_headers() {
    refused(vec![], "header");
    refused(b"GGU".to_vec(), "header");
    refused(b"GGML\x03\0\0\0".to_vec(), "not a GGUF file");
    refused(b"GGUF\x03\0\0".to_vec(), "header");
    for (v, what) in [
        (1u32, "version 1"),
        (4, "version 4"),
        (0x0300_0000, "big-endian"),
    ] {
        let e = refused(
            Builder {
                version: v,
                ..Builder::new()
            }
            .build(),
            what,
        );
        assert!(matches!(e, ConvertError::Unsupported(_)), "{e}");
    }
    let mut b = Builder::new().build();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    refused(b, "claims 18446744073709551615 tensors");
    let mut b = Builder::new().build();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    refused(b, "metadata entries");
}

#[test]
fn bad_metadata() {
    // A key whose length runs past the end.
    let mut b = Builder::new().build();
    b[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    refused(b, "metadata entry 0: key");
    refused(
        Builder::new().kv("k", 13, &[0; 8]).build(),
        "unknown value type 13",
    );
    refused(
        Builder::new()
            .kv("k", STRING, &u64::MAX.to_le_bytes())
            .build(),
        "metadata `k`",
    );
    // A huge array count of u8s, arrays of an unknown type.
    let mut arr = 0u32.to_le_bytes().to_vec();
    arr.extend((1u64 << 62).to_le_bytes());
    refused(Builder::new().kv("k", ARRAY, &arr).build(), "cannot fit");
    let mut arr = 77u32.to_le_bytes().to_vec();
    arr.extend(1u64.to_le_bytes());
    refused(
        Builder::new()
            .kv("k", ARRAY, &[arr, vec![0; 8]].concat())
            .build(),
        "unknown value type 77",
    );
    // Arrays nested 100 deep: refused, not a stack overflow.
    let mut nested = vec![];
    for _ in 0..100 {
        nested.extend(ARRAY.to_le_bytes());
        nested.extend(1u64.to_le_bytes());
    }
    nested.extend([0u8; 16]);
    let mut v = ARRAY.to_le_bytes().to_vec();
    v.extend(1u64.to_le_bytes());
    v.extend(&nested[..nested.len() - 4]);
    refused(
        Builder::new().kv("k", ARRAY, &v).build(),
        "nested more than 8 deep",
    );
    refused(
        Builder::new().u32("k", 1).u32("k", 2).build(),
        "appears twice",
    );
    refused(
        Builder::new().u32("general.alignment", 3).build(),
        "general.alignment",
    );
    refused(
        Builder::new().u32("general.alignment", 0).build(),
        "general.alignment",
    );
    // Cut inside the last value (before the padding that follows it).
    let b = Builder::new();
    let end = 24 + b.kv.len();
    refused(
        b.build()[..end - 1].to_vec(),
        "metadata `general.architecture`",
    );
}

#[test]
fn bad_tensor_infos() {
    let one = f32_bytes(1);
    refused(
        Builder::new().tensor("t", &[1; 5], 0, &one).build(),
        "5 dimensions",
    );
    refused(
        Builder::new().info("t", &[u64::MAX, 2], 0, 0).build(),
        "overflow",
    );
    refused(
        Builder::new().info("t", &[1 << 62], 0, 0).build(),
        "overflows",
    );
    refused(
        Builder::new().tensor("t", &[1], 99, &one).build(),
        "unknown ggml type id 99",
    );
    refused(
        Builder::new().tensor("t", &[33], 2, &[0; 18]).build(),
        "not a whole number of Q4_0 blocks",
    );
    refused(
        Builder::new().info("t", &[4], 0, 1 << 40).build(),
        "beyond the end",
    );
    refused(
        Builder::new().info("t", &[4], 0, u64::MAX - 31).build(),
        "overflows",
    );
    refused(
        Builder::new()
            .tensor("t", &[1], 0, &one)
            .info("t2", &[1], 0, 4)
            .build(),
        "not a multiple of the alignment",
    );
    refused(
        Builder::new()
            .tensor("t", &[1], 0, &one)
            .tensor("t", &[1], 0, &one)
            .build(),
        "appears twice",
    );
    let b = Builder::new().tensor("t", &[8], 0, &f32_bytes(8)).build();
    refused(b[..b.len() - 1].to_vec(), "beyond the end");
    let t = Builder::new().tensor("t", &[1], 0, &one);
    let at = 24 + t.kv.len() + 8; // the name of tensor 0 is not UTF-8
    let mut b = t.build();
    b[at] = 0xFF;
    refused(b, "not UTF-8");
}

#[test]
fn unloadable_tensors_are_refused_by_gguf_weights() {
    // NVFP4 (ggml type 40: 64 values in 36 bytes) is a valid GGUF type
    // that mllm cannot dequantize (Q5_0, used here before, now loads).
    let g = open(
        Builder::new()
            .tensor("blk.0.ffn_up.weight", &[64], 40, &[0; 36])
            .build(),
    )
    .unwrap();
    let e = GgufWeights::new(g).unwrap_err().to_string();
    assert!(
        e.contains("blk.0.ffn_up.weight") && e.contains("NVFP4"),
        "{e}"
    );
    // Llama Q needs the head count to undo the permutation.
    let q = Builder::new().tensor("blk.0.attn_q.weight", &[1, 8], 0, &f32_bytes(8));
    let e = GgufWeights::new(open(q.build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("head_count"), "{e}");
    let q = Builder::new().u32("llama.attention.head_count", 3).tensor(
        "blk.0.attn_q.weight",
        &[1, 8],
        0,
        &f32_bytes(8),
    );
    let e = GgufWeights::new(open(q.build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("8 rows"), "{e}");
    // Two GGUF tensors claiming one HF name.
    let two = Builder::new()
        .tensor("output.weight", &[1], 0, &f32_bytes(1))
        .tensor("lm_head.weight", &[1], 0, &f32_bytes(1));
    let e = GgufWeights::new(open(two.build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("lm_head.weight"), "{e}");
}

#[test]
fn hf_config_needs_its_keys() {
    let e = hf_config(&open(Builder::new().build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("llama.embedding_length") && e.contains("bad.gguf"),
        "{e}"
    );
    let b = Builder {
        n_kv: 0,
        kv: vec![],
        ..Builder::new()
    }
    .kv("general.architecture", STRING, &gstr("gpt2"));
    let e = hf_config(&open(b.build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`gpt2` is not supported"), "{e}");
    // A qwen2 file: class name, and defaults for kv heads and rope_theta.
    let b = Builder {
        n_kv: 0,
        kv: vec![],
        ..Builder::new()
    }
    .kv("general.architecture", STRING, &gstr("qwen2"))
    .u32("qwen2.embedding_length", 64)
    .u32("qwen2.feed_forward_length", 128)
    .u32("qwen2.block_count", 2)
    .u32("qwen2.attention.head_count", 4)
    .u32("qwen2.vocab_size", 100)
    .kv("qwen2.context_length", STRING, &gstr("long"));
    let e = hf_config(&open(b.build()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("qwen2.context_length should be a number"), "{e}");
    let b = Builder {
        n_kv: 0,
        kv: vec![],
        ..Builder::new()
    }
    .kv("general.architecture", STRING, &gstr("qwen2"))
    .u32("qwen2.embedding_length", 64)
    .u32("qwen2.feed_forward_length", 128)
    .u32("qwen2.block_count", 2)
    .u32("qwen2.attention.head_count", 4)
    .u32("qwen2.vocab_size", 100);
    let c = hf_config(&open(b.build()).unwrap()).unwrap();
    assert_eq!(c["architectures"][0], "Qwen2ForCausalLM");
    assert_eq!(c["num_key_value_heads"], 4);
    assert_eq!(c["rope_theta"], 10000.0);
    assert_eq!(c["vocab_size"], 100);
    assert_eq!(c["tie_word_embeddings"], true);
}

fn qwen3_fixture() -> Vec<u8> {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/gguf/tiny_qwen3.gguf");
    std::fs::read(p).unwrap()
}

/// Whatever `open` accepted must also load and configure without panicking.
fn exercise(path: &std::path::Path) {
    if let Ok(g) = GgufFile::open(path) {
        let _ = hf_config(&g);
        if let Ok(w) = GgufWeights::new(g) {
            for n in w.names() {
                let _ = w.info(&n);
                let _ = w.load(&n);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn mutated_files_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<bool>()), 1..6),
        cut in proptest::option::of(any::<usize>()),
        wide in any::<bool>(),
    ) {
        let mut b = qwen3_fixture();
        // Mostly hit the header, metadata and tensor infos (the first ~2.4 KB);
        // the rest of the file is tensor data, where any byte is valid.
        let span = if wide { b.len() } else { 2432 };
        for (at, byte, big) in edits {
            let at = at % span;
            if big && at + 8 <= b.len() {
                // Counts and lengths: an extreme u64.
                let v = [u64::MAX, 1 << 40, 0x8000_0000, byte as u64][at % 4];
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            } else {
                b[at] ^= byte.max(1);
            }
        }
        if let Some(cut) = cut {
            b.truncate(cut % (b.len() + 1));
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mutated.gguf");
        std::fs::write(&p, &b).unwrap();
        exercise(&p);
    }

    #[test]
    fn truncated_files_are_errors(cut in 0usize..2600) {
        let b = qwen3_fixture();
        let e = open(b[..cut].to_vec()).expect_err("a cut file is incomplete");
        prop_assert!(e.to_string().contains("bad.gguf"));
    }
}
