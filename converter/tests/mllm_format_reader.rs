//! The `.mllm` reader on damaged files (converter/FORMAT.md, "Reading"):
//! every broken header, metadata or table entry is refused with an error
//! that names the problem, checksums are checked on demand only, and a
//! property test mutates and truncates the eager part of a valid file to
//! show that opening never panics or reads out of bounds.

use std::path::Path;

use mllm_backends::quant::{self, QuantType};
use mllm_backends::weights::WeightSource;
use mllm_converter::mllm_format::{
    layout, MllmFile, MllmWriter, PlannedTensor, Recipe, StoredType,
};
use mllm_converter::ConvertError;
use proptest::prelude::*;
use serde_json::json;

/// A small valid file: three tensors (f32, f16, q8_0) and full metadata.
fn small_file() -> Vec<u8> {
    // Written once (the writer syncs to disk), copied for every case.
    static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILE.get_or_init(write_small_file).clone()
}

fn write_small_file() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.mllm");
    let tensors = vec![
        PlannedTensor {
            name: "a".into(),
            ty: StoredType::F32,
            requested: StoredType::F32,
            shape: vec![3, 5],
        },
        PlannedTensor {
            name: "b".into(),
            ty: StoredType::F16,
            requested: StoredType::F16,
            shape: vec![7],
        },
        PlannedTensor {
            name: "c".into(),
            ty: StoredType::Quant(QuantType::Q8_0),
            requested: StoredType::Quant(QuantType::Q4_K),
            shape: vec![2, 32],
        },
    ];
    let meta = json!({
        "config": {"model_type": "x"},
        "recipe": Recipe::default_for(StoredType::F16).to_json(),
        "source": {"format": "test"},
        "tokenizer_json": "{}",
    });
    let mut w = MllmWriter::create(&out, &meta, &tensors).unwrap();
    let a: Vec<u8> = (0..15).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.write_next("a", &a).unwrap();
    w.write_next("b", &[0x3c; 14]).unwrap();
    let x: Vec<f32> = (0..64).map(|i| i as f32 / 10.0).collect();
    w.write_next("c", &quant::quantize(QuantType::Q8_0, &x).unwrap())
        .unwrap();
    w.finish().unwrap();
    std::fs::read(&out).unwrap()
}

fn eager_end(b: &[u8]) -> usize {
    let h = layout::Header::decode(b).unwrap();
    64 + h.meta_len as usize + h.table_len as usize
}

fn fix_crc(b: &mut [u8]) {
    let end = eager_end(b).min(b.len());
    let crc = layout::header_crc(&b[..end]);
    b[52..56].copy_from_slice(&crc.to_le_bytes());
}

/// Byte offset of table entry `i` and the decoded entries.
fn entry_at(b: &[u8], i: usize) -> (usize, layout::RawEntry) {
    let h = layout::Header::decode(b).unwrap();
    let start = 64 + h.meta_len as usize;
    let entries = layout::decode_table(&b[start..eager_end(b)], h.tensor_count).unwrap();
    let pos = start + entries[..i].iter().map(|e| e.encoded_len()).sum::<usize>();
    (pos, entries[i].clone())
}

fn open_err(b: Vec<u8>) -> String {
    MllmFile::from_bytes("t.mllm", b).unwrap_err().to_string()
}

#[test]
fn small_file_opens_and_verifies() {
    let b = small_file();
    let f = MllmFile::from_bytes("t.mllm", b.clone()).unwrap();
    assert_eq!(f.version(), (1, 0));
    assert_eq!(f.names(), vec!["a", "b", "c"]);
    assert_eq!(f.load("a").unwrap().to_f32_vec().unwrap()[14], 14.0);
    assert_eq!(f.tensor("c").unwrap().requested.name(), "q4_k");
    f.verify().unwrap();
    // A flipped data byte: opening stays lazy, verify names the tensor.
    let mut d = b.clone();
    let off = f.tensor("b").unwrap().offset;
    d[off] ^= 1;
    let g = MllmFile::from_bytes("t.mllm", d).unwrap();
    let e = g.verify().unwrap_err().to_string();
    assert!(e.contains("tensor `b` has checksum"), "{e}");
    assert!(g.verify_tensor("a").is_ok());
}

/// A Q8_KS tensor whose CRC is right but whose code bytes are not 0..=127
/// (a file another tool wrote): the check names the tensor and block, on
/// the mapped path (pieces of 256 KiB read from the file, the bad block in
/// the second piece) and on the in-memory one; any byte of a block's
/// scales and `d` is fine.
#[test]
fn q8_ks_code_bytes_above_127_are_refused() {
    let blocks = 1000;
    let mut data: Vec<u8> = (0..blocks * 274).map(|i| (i * 7 % 128) as u8).collect();
    for b in 0..blocks {
        // scales and d: every byte value, 128..=255 included
        for j in 256..274 {
            data[b * 274 + j] = (b * 31 + j * 13) as u8 | 0x80;
        }
    }
    let write = |data: &[u8]| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("q.mllm");
        let ty = StoredType::Quant(QuantType::Q8KS { shift: 3 });
        let tensors = vec![PlannedTensor {
            name: "w".into(),
            ty,
            requested: ty,
            shape: vec![blocks, 256],
        }];
        let meta = json!({
            "config": {"model_type": "x"},
            "recipe": Recipe::default_for(StoredType::F16).to_json(),
            "source": {"format": "test"},
            "tokenizer_json": "{}",
        });
        let mut w = MllmWriter::create(&out, &meta, &tensors).unwrap();
        w.write_next("w", data).unwrap();
        w.finish().unwrap();
        (dir, out)
    };
    let (_d, ok) = write(&data);
    MllmFile::open(&ok).unwrap().verify().unwrap();
    let mut bad = data.clone();
    bad[990 * 274 + 255] = 200;
    let (_d2, bad_path) = write(&bad);
    let f = MllmFile::open(&bad_path).unwrap();
    for e in [
        f.verify().unwrap_err().to_string(),
        f.verify_tensor("w").unwrap_err().to_string(),
    ] {
        assert!(e.contains("tensor `w` is Q8_KS"), "{e}");
        assert!(e.contains("block 990 holds 200"), "{e}");
    }
    let g = MllmFile::from_bytes("t.mllm", std::fs::read(&bad_path).unwrap()).unwrap();
    let e = g.verify().unwrap_err().to_string();
    assert!(e.contains("block 990 holds 200"), "{e}");
}

/// An edit of a file image.
type Patch = Box<dyn Fn(&mut Vec<u8>)>;

#[test]
fn damaged_headers_are_refused_clearly() {
    let b = small_file();
    // (expected message, edit, whether to fix the header CRC after it)
    let cases: Vec<(&str, Patch, bool)> = vec![
        (
            "truncated",
            Box::new(|b| {
                b.pop();
            }),
            false,
        ),
        (
            "shorter than the 64-byte header",
            Box::new(|b| b.truncate(20)),
            false,
        ),
        ("not an .mllm file", Box::new(|b| b[1] = b'X'), false),
        ("text-mode transfer", Box::new(|b| b[5] = b'\n'), false),
        (
            "version 2.0 is not supported",
            Box::new(|b| b[8] = 2),
            false,
        ),
        ("reserved header bytes", Box::new(|b| b[60] = 1), false),
        (
            "checksum",
            Box::new(|b| {
                let i = eager_end(b) - 1;
                b[i] ^= 0x40;
            }),
            false,
        ),
        (
            "alignment 48",
            Box::new(|b| b[12..16].copy_from_slice(&48u32.to_le_bytes())),
            true,
        ),
        ("not valid JSON", Box::new(|b| b[64] = b'['), true),
        (
            "unknown stored type id 99",
            Box::new(|b| {
                let (p, e) = entry_at(b, 0);
                let at = p + 2 + e.name.len();
                b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
            }),
            true,
        ),
        (
            "takes 30 bytes, but the table says 60",
            Box::new(|b| {
                let (p, e) = entry_at(b, 0);
                let at = p + 2 + e.name.len();
                b[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
            }),
            true,
        ),
        (
            "not a multiple of the alignment",
            Box::new(|b| {
                let (p, e) = entry_at(b, 1);
                let at = p + e.encoded_len() - 20;
                b[at] += 1;
            }),
            true,
        ),
        (
            "overlap",
            Box::new(|b| {
                let (p, e) = entry_at(b, 1);
                let at = p + e.encoded_len() - 20;
                b[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
            }),
            true,
        ),
        (
            "outside the",
            Box::new(|b| {
                let (p, e) = entry_at(b, 2);
                let at = p + e.encoded_len() - 20;
                b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
            }),
            true,
        ),
        (
            "appears twice",
            Box::new(|b| {
                let (p, _) = entry_at(b, 1);
                b[p + 2] = b'a';
            }),
            true,
        ),
        (
            "whole number of 32-value q8_0 blocks",
            Box::new(|b| {
                let (p, e) = entry_at(b, 2);
                let at = p + 2 + e.name.len() + 9 + 8;
                b[at] = 33;
            }),
            true,
        ),
        ("more than a", Box::new(|b| b[48] = 200), true),
        (
            "bytes after its 2 entries",
            Box::new(|b| {
                b[48] = 2;
            }),
            true,
        ),
        (
            "past the end",
            Box::new(|b| b[16..24].copy_from_slice(&(1u64 << 29).to_le_bytes())),
            false,
        ),
        (
            "ends at byte",
            Box::new(|b| {
                let n = b.len() as u64 + 64;
                b[40..48].copy_from_slice(&n.to_le_bytes());
            }),
            true,
        ),
    ];
    for (want, patch, crc) in cases {
        let mut d = b.clone();
        patch(&mut d);
        if crc {
            fix_crc(&mut d);
        }
        let e = open_err(d);
        assert!(e.contains(want), "{want}: got {e}");
    }
    let e = MllmFile::open(Path::new("/nonexistent.mllm")).unwrap_err();
    assert!(matches!(e, ConvertError::Io { .. }));
}

#[test]
fn metadata_must_have_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    for (meta, want) in [
        (json!({"recipe": {}, "source": {}}), "no \"config\""),
        (
            json!({"config": {}, "recipe": {"type": "f16", "rules": []}, "source": {}, "chat_template": 3}),
            "\"chat_template\" is not a string",
        ),
        (
            json!({"config": {}, "recipe": {"type": "f16"}, "source": {}}),
            "no \"rules\" list",
        ),
    ] {
        let out = dir.path().join("m.mllm");
        MllmWriter::create(&out, &meta, &[])
            .unwrap()
            .finish()
            .unwrap();
        let e = MllmFile::open(&out).unwrap_err().to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Any mutation or truncation of the eager part: an error or a file
    /// whose every tensor loads or fails cleanly, never a panic.
    #[test]
    fn mutated_headers_never_panic(
        edits in prop::collection::vec((0usize..1024, any::<u8>()), 1..8),
        cut in prop::option::of(0usize..2048),
        fix in any::<bool>(),
    ) {
        let mut b = small_file();
        let end = eager_end(&b);
        for (i, v) in edits {
            let i = i % end;
            b[i] = v;
        }
        if fix && b.len() >= 64 && layout::Header::decode(&b).is_ok() {
            let h = layout::Header::decode(&b).unwrap();
            let e = 64u64.saturating_add(h.meta_len).saturating_add(h.table_len);
            if e <= b.len() as u64 {
                fix_crc(&mut b);
            }
        }
        if let Some(c) = cut {
            b.truncate(c.min(b.len()));
        }
        if let Ok(f) = MllmFile::from_bytes("fuzz.mllm", b) {
            for n in f.names() {
                let _ = f.load(&n);
            }
            let _ = f.verify();
        }
    }
}
