//! PyTorch zip checkpoints (tests/fixtures/pytorch/make_pytorch_fixtures.py):
//! a torch.save'd state dict loads exactly like its safetensors twin (tied,
//! strided and offset views, f64 and integer buffers included), converts to
//! .mllm, and pickles that reach for anything but tensors are refused —
//! the committed `os.system` / `builtins.eval` archives and hand-built ones
//! here — without a panic on any mutation of a real `data.pkl`.

use std::io::Write;
use std::path::PathBuf;

use half::f16;
use mllm_backends::weights::WeightSource;
use mllm_backends::{Buffer, DType};
use mllm_converter::mllm_format::{convert, MllmFile};
use mllm_converter::pytorch::PytorchCheckpoint;
use mllm_converter::{ConvertError, SafetensorsDir};
use proptest::prelude::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pytorch")
        .join(name)
}

#[test]
fn state_dict_loads_like_its_safetensors_twin() {
    let pt = PytorchCheckpoint::open(&fixture("tiny.bin")).unwrap();
    let st = SafetensorsDir::open(&fixture("tiny.safetensors")).unwrap();
    assert_eq!(pt.names(), st.names());
    for name in st.names() {
        assert_eq!(pt.info(&name), st.info(&name), "{name}");
        let (a, b) = (pt.load(&name).unwrap(), st.load(&name).unwrap());
        assert_eq!(a.shape(), b.shape(), "{name}");
        assert_eq!(a.dtype(), b.dtype(), "{name}");
        if a.dtype() == DType::I32 {
            assert_eq!(a.i32s().unwrap(), b.i32s().unwrap(), "{name}");
        } else {
            // Bit-exact, f16/bf16 included.
            let bits = |t: &mllm_backends::Tensor| -> Vec<u32> {
                t.to_f32_vec()
                    .unwrap()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect()
            };
            assert_eq!(bits(&a), bits(&b), "{name}");
        }
    }
    // Contiguous tensors borrow the archive; the transposed view is copied.
    let borrowed = |n: &str| matches!(**pt.load(n).unwrap().buffer(), Buffer::Bytes { .. });
    assert!(borrowed("model.embed_tokens.weight"));
    assert!(borrowed("lm_head.weight"));
    assert!(borrowed("model.norm.weight"));
    assert!(!borrowed("model.layers.0.mlp.down_proj.weight"));
    assert!(pt.describe().contains("tiny.bin"));
}

#[test]
fn converts_to_mllm_with_the_config_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("tiny.bin"), dir.path().join("pytorch_model.bin")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "tiny", "hidden_size": 8}"#,
    )
    .unwrap();
    let out = dir.path().join("tiny.mllm");
    // The directory (pytorch_model.bin) and the file both work.
    for src in [
        dir.path().to_path_buf(),
        dir.path().join("pytorch_model.bin"),
    ] {
        convert(&src, &out, "f16", None, |_, _| {}).unwrap();
        let f = MllmFile::open(&out).unwrap();
        f.verify().unwrap();
        assert_eq!(f.source()["format"], "pytorch");
        assert_eq!(f.config()["hidden_size"], 8);
        let st = SafetensorsDir::open(&fixture("tiny.safetensors")).unwrap();
        assert_eq!(f.names(), st.names());
        for name in st.names() {
            let src = st.load(&name).unwrap();
            let got = f.load(&name).unwrap();
            if src.dtype() == DType::I32 {
                assert_eq!(got.i32s().unwrap(), src.i32s().unwrap(), "{name}");
                continue;
            }
            let v = src.to_f32_vec().unwrap();
            let want: Vec<f32> = if src.rank() >= 2 {
                v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
            } else {
                v
            };
            assert_eq!(got.to_f32_vec().unwrap(), want, "{name}");
        }
    }
}

fn refused(path: &std::path::Path) -> String {
    let e = PytorchCheckpoint::open(path).unwrap_err();
    assert!(matches!(
        e,
        ConvertError::Corrupt(_) | ConvertError::Unsupported(_)
    ));
    e.to_string()
}

#[test]
fn forbidden_globals_are_refused() {
    let e = refused(&fixture("evil_os_system.pt"));
    assert!(e.contains("`os.system`") && e.contains("refuses"), "{e}");
    let e = refused(&fixture("evil_stack_global.pt"));
    assert!(e.contains("`builtins.eval`"), "{e}");
    // Converting one fails the same way and leaves nothing behind.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("evil_os_system.pt"), dir.path().join("m.pt")).unwrap();
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    let out = dir.path().join("m.mllm");
    let e = convert(&dir.path().join("m.pt"), &out, "q8_0", None, |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("os.system"), "{e}");
    assert!(!out.exists());
}

/// A zip archive `t/data.pkl` (+ the given extra entries), stored.
fn archive(pickle: &[u8], extra: &[(&str, &[u8])]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    {
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        z.start_file("t/data.pkl", opts).unwrap();
        z.write_all(pickle).unwrap();
        for (name, data) in extra {
            z.start_file(format!("t/{name}"), opts).unwrap();
            z.write_all(data).unwrap();
        }
        let bytes = z.finish().unwrap().into_inner();
        f.write_all(&bytes).unwrap();
    }
    f
}

fn s(x: &str) -> Vec<u8> {
    let mut v = vec![b'X'];
    v.extend_from_slice(&(x.len() as u32).to_le_bytes());
    v.extend_from_slice(x.as_bytes());
    v
}

/// `{"w": tensor}` over storage "0" (`numel` floats) with the given view.
fn one_tensor(numel: u8, offset: u8, size: &[u8], stride: &[u8]) -> Vec<u8> {
    let mut p = b"\x80\x02}(".to_vec();
    p.extend(s("w"));
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    p.extend(s("storage"));
    p.extend(b"ctorch\nFloatStorage\n");
    p.extend(s("0"));
    p.extend(s("cpu"));
    p.extend([b'K', numel, b't', b'Q', b'K', offset, b'(']);
    for &d in size {
        p.extend([b'K', d]);
    }
    p.extend(b"t(");
    for &d in stride {
        p.extend([b'K', d]);
    }
    p.extend(b"t\x89NtRu.");
    p
}

#[test]
fn hand_built_pickles() {
    let floats: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    // A valid one, to know the builder is right.
    let ok = archive(&one_tensor(6, 0, &[2, 3], &[3, 1]), &[("data/0", &floats)]);
    let ck = PytorchCheckpoint::open(ok.path()).unwrap();
    assert_eq!(
        ck.load("w").unwrap().to_f32_vec().unwrap(),
        vec![0., 1., 2., 3., 4., 5.]
    );
    // A view past its storage.
    let f = archive(&one_tensor(6, 1, &[2, 3], &[3, 1]), &[("data/0", &floats)]);
    assert!(refused(f.path()).contains("reaches element 6 of a storage of 6"));
    // A storage whose bytes do not match its size, or that is missing.
    let f = archive(&one_tensor(7, 0, &[2, 3], &[3, 1]), &[("data/0", &floats)]);
    assert!(refused(f.path()).contains("has 24 bytes; its 7"));
    let f = archive(&one_tensor(6, 0, &[2, 3], &[3, 1]), &[]);
    assert!(refused(f.path()).contains("missing from the archive"));
    // Big-endian archives.
    let f = archive(
        &one_tensor(6, 0, &[2, 3], &[3, 1]),
        &[("data/0", &floats), ("byteorder", b"big")],
    );
    assert!(refused(f.path()).contains("big-endian"));

    let cases: &[(&[u8], &str)] = &[
        (b"\x80\x02cbuiltins\ngetattr\n.", "`builtins.getattr`"),
        (b"\x80\x02ctorch\nFloatStorage\n)R.", "not allowed"),
        (
            b"\x80\x02ccollections\nOrderedDict\n)\x81.",
            "arbitrary Python object",
        ),
        (b"\x80\x02\x82\x01.", "extension registry"),
        (b"\x80\x02}(", "ends without STOP"),
        (b"\x80\x02X\xff\xff\xff\xff.", "needs 4294967295 bytes"),
        (b"\x80\x02h\x05.", "memo entry 5"),
        (b"\x80\x02s.", "stack underflow"),
        (b"\x80\x02]q\x00]h\x00ah\x00Na.", "after nesting"),
        (b"\x80\x02N.", "without tensors"),
        (b"\x80\x02(t.", "without tensors"),
        (b"\x80\x02S'x'\n.", "not supported"),
    ];
    for (pickle, want) in cases {
        let f = archive(pickle, &[]);
        let e = refused(f.path());
        assert!(e.contains(want), "{want}: {e}");
    }
    // Nesting deeper than the limit.
    let mut deep = b"\x80\x02)".to_vec();
    deep.extend(std::iter::repeat_n(0x85u8, 100));
    deep.push(b'.');
    assert!(refused(archive(&deep, &[]).path()).contains("nest more than 64"));

    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("old.bin");
    std::fs::write(
        &legacy,
        b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.",
    )
    .unwrap();
    assert!(refused(&legacy).contains("legacy"));
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"hello").unwrap();
    assert!(refused(&junk).contains("not a PyTorch zip checkpoint"));
}

fn tiny_pickle() -> Vec<u8> {
    use std::io::Read;
    let mut z = zip::ZipArchive::new(std::fs::File::open(fixture("tiny.bin")).unwrap()).unwrap();
    let mut v = vec![];
    z.by_name("tiny/data.pkl")
        .unwrap()
        .read_to_end(&mut v)
        .unwrap();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Mutated or truncated real pickles: an error or a checkpoint, never a panic.
    #[test]
    fn mutated_pickles_never_panic(
        edits in prop::collection::vec((0usize..4096, any::<u8>()), 1..6),
        cut in prop::option::of(0usize..4096),
    ) {
        let mut p = tiny_pickle();
        let n = p.len();
        for (i, v) in edits {
            p[i % n] = v;
        }
        if let Some(c) = cut {
            p.truncate(c.min(n));
        }
        // The storages of tiny.bin, so that valid variants can load.
        let mut z = zip::ZipArchive::new(std::fs::File::open(fixture("tiny.bin")).unwrap()).unwrap();
        let mut extra: Vec<(String, Vec<u8>)> = vec![];
        for i in 0..z.len() {
            use std::io::Read;
            let mut f = z.by_index(i).unwrap();
            let name = f.name().unwrap().to_string();
            if let Some(k) = name.strip_prefix("tiny/data/") {
                let mut v = vec![];
                f.read_to_end(&mut v).unwrap();
                extra.push((format!("data/{k}"), v));
            }
        }
        let extra: Vec<(&str, &[u8])> = extra.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let f = archive(&p, &extra);
        if let Ok(ck) = PytorchCheckpoint::open(f.path()) {
            for name in ck.names() {
                let _ = ck.load(&name);
            }
        }
    }
}
