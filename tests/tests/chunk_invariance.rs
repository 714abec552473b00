//! Chunk invariance (issue #31): a token's logits do not depend on how its
//! prompt was cut into steps. A prompt of ~150 tokens is computed in one
//! step (logits of every row), token by token, and cut at random points
//! into chunks of 1 to 90 tokens (below and above the 32 queries where
//! attention switches from the per-query to the tiled kernel, across its
//! 64-key blocks); at every cut the last row's logits must have exactly
//! the bits the one-step run gave that position. On every attention
//! architecture, float and quantized weights, f32 and f16 KV caches, eager
//! and with compiled decode steps (the fixtures' 16-value heads cannot be
//! q8_0 blocks; `backends/tests/row_invariance.rs` covers q8_0 caches).
//!
//! Where a CPU runs Arm's i8mm tiles (above 32 rows) or has no SIMD
//! attention path, steps above 32 rows may differ in the last bits:
//! `mllm_backends::cpu::chunk_invariant()` says so, and the test then cuts
//! at most 32 tokens per step (and says it did).

mod common;

use common::*;
use mllm_backends::DType;
use mllm_runtime::{Runner, Sequence};

/// `n` tokens drawn from the fixture's prompt (valid ids of its vocabulary).
fn long_prompt(base: &[i32], n: usize) -> Vec<u32> {
    let len = base.len();
    (0..n)
        .map(|j| base[(j * 7 + j / len) % len] as u32)
        .collect()
}

/// Chunk sizes covering `n` tokens, from a small seeded generator.
fn cuts(n: usize, seed: u64, most: usize) -> Vec<usize> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = vec![];
    let mut left = n;
    while left > 0 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Mostly short chunks, some long ones.
        let pick = (x >> 33) as usize;
        let size = if pick.is_multiple_of(3) {
            1 + pick % 90
        } else {
            1 + pick % 12
        };
        let size = size.min(most).min(left);
        out.push(size);
        left -= size;
    }
    out
}

fn ok<T>(r: mllm_runtime::Result<T>, case: &str) -> T {
    r.unwrap_or_else(|e| panic!("{case}: {}", e.render(false)))
}

fn check(runner: &mut Runner, ids: &[u32], kv: DType, case: &str) {
    let most = if mllm_backends::cpu::chunk_invariant() {
        usize::MAX
    } else {
        eprintln!(
            "{case}: this CPU's kernels are row-invariant up to 32 rows only: cutting at most 32"
        );
        mllm_backends::cpu::ROW_INVARIANT_STEP
    };
    let fresh = || {
        let mut s = Sequence::new(None);
        ok(s.set_kv_dtype(kv), case);
        s
    };
    // The reference: every row of one step (one-row steps where long
    // steps are not invariant on this CPU).
    let mut whole = fresh();
    let rows: Vec<Vec<f32>> = if most == usize::MAX {
        ok(whole.extend_rows(runner, ids), case)
    } else {
        ids.iter()
            .map(|&t| ok(whole.extend(runner, &[t]), case))
            .collect()
    };
    assert_eq!(rows.len(), ids.len(), "{case}");
    for row in &rows {
        assert_finite(case, row);
    }
    let mut patterns: Vec<Vec<usize>> = (0..4).map(|s| cuts(ids.len(), s, most)).collect();
    patterns.push(vec![1; ids.len()]);
    for (p, sizes) in patterns.iter().enumerate() {
        let mut seq = fresh();
        let mut at = 0;
        for &n in sizes {
            let logits = ok(seq.extend(runner, &ids[at..at + n]), case);
            at += n;
            let want = &rows[at - 1];
            let same = logits
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{case}: cut pattern {p} {sizes:?}: the chunk ending at token {at} gives other logits than one step (largest difference {:e})",
                max_abs(&logits, want)
            );
        }
    }
}

#[test]
fn logits_do_not_depend_on_how_the_prompt_was_cut() {
    for (script_name, case) in [
        ("qwen3", "gqa_tied_f32"),
        ("qwen3", "untied_bf16_ropeparams"),
        ("llama", "llama/smollm_like_tied"),
        ("qwen2", "qwen2/gqa_tied_f32"),
        // Sliding windows, sparse experts routed per row, NoPE layers.
        ("gemma3", "gemma3/gemma3_f32"),
        ("qwen3_moe", "qwen3_moe/moe_f32"),
        ("smollm3", "smollm3/smollm3_f32"),
        // Not Qwen3.5: its Gated DeltaNet layers compute a prompt chunk
        // with the chunked delta rule, whose sums depend on the chunk's
        // length (`Sequence` then shares whole chunks only).
    ] {
        let r = reference(case);
        let ids = long_prompt(&r.input_ids, 150);
        let mut runner = load_with(&script(script_name), case).runner;
        for kv in [DType::F32, DType::F16] {
            check(&mut runner, &ids, kv, &format!("{case}, {kv} cache"));
        }
        runner.compile_default(256);
        check(&mut runner, &ids, DType::F16, &format!("{case}, compiled"));
    }
}

#[test]
fn logits_do_not_depend_on_how_the_prompt_was_cut_on_quantized_weights() {
    let case = "quant_scaled_f32";
    let r = reference(case);
    let ids = long_prompt(&r.input_ids, 150);
    let dir = tempfile::tempdir().expect("tmp");
    for ty in ["q4_0", "q8_0", "q4_k", "q6_k", "w8a8"] {
        let out = dir.path().join(format!("{ty}.mllm"));
        mllm_converter::mllm_format::convert(&fixture(case), &out, ty, None, |_, _| {})
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let m = mllm_runtime::load(&qwen3_script(), out.to_str().expect("utf-8"))
            .unwrap_or_else(|e| panic!("{ty}: {}", e.render(false)));
        let mut runner = m.runner;
        check(&mut runner, &ids, DType::F16, &format!("{case} as {ty}"));
    }
}
