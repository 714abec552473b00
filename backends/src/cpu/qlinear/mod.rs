//! `linear` with weights that stay quantized in memory (ggml blocks, the
//! layout of `Tensor::quant_bytes`), the way llama.cpp computes it: the
//! activations are quantized once per call to int8 blocks (`act_quant`),
//! then every (weight block, activation block) pair is an integer dot
//! product scaled once in float.
//!
//! - `q4_0`, `q4_1`, `q8_0`, `q5` (Q5_0, Q5_1), `iq4_nl`: the 32-value
//!   block types, described for the shared tile engine in `block32`;
//! - `k_quants`: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS against 256-value
//!   activation blocks (prefill on x86 through unpacked panels,
//!   `k_quants/panel.rs`);
//! - `w8a8`: per-row int8 weights against activations quantized per token;
//! - `w4a16`: grouped 4-bit weights against f32 activations (no activation
//!   rounding at all).
//!
//! Every kernel has a scalar integer twin computing the same per-block
//! integers (`Isa::Scalar`), and `linear_ref` (dequantize to f32, f32 dot)
//! is the oracle for all. SIMD paths are chosen at run time: AVX2
//! (`maddubs`/`madd`), AVX-512 VNNI (`vpdpbusd`/`vpdpwssd` on 256-bit
//! vectors), NEON with `sdot` when the CPU has dotprod (and `smmla` 2x2
//! tiles for the 32-value types' prefill with i8mm), plain NEON else.
//! `MLLM_QLINEAR_ISA=scalar|avx2|avx512vnni|neon|neon-dot|neon-i8mm` forces a path
//! (one the CPU has), for benchmarks and bisecting; on x86 it also caps the
//! other CPU kernels (`Isa::allows_avx2`, `Isa::allows_avx512`), so a forced
//! `avx2` times what an AVX2-only CPU runs.
//!
//! Work is split over output features (weight rows) on the pool (`parts`,
//! which also serves merged linears: several weights, one input); within a
//! task, tiles of 4 weight rows by 1-4 activation rows decode each weight
//! block once per tile and keep its rows in L1 while the activation rows
//! stream, which serves decode (m = 1..4, memory-bound) and prefill
//! (m large, compute-bound) alike.

// The kernels index small register tiles by row and column on purpose.
#![allow(clippy::needless_range_loop)]

pub mod act_quant;
mod block32;
mod iq4_nl;
mod k_quants;
#[cfg(target_arch = "x86_64")]
mod k_zmm;
#[cfg(target_arch = "aarch64")]
mod neon_dot;
mod parts;
mod q4_0;
mod q4_1;
mod q5;
mod q8_0;
mod w4a16;
mod w8a8;
mod x16;
#[cfg(target_arch = "x86_64")]
mod x16_avx2;
#[cfg(target_arch = "x86_64")]
mod zmm;

use std::sync::OnceLock;

pub use self::parts::Part;
use crate::error::{invalid, shape_err, BackendError, Result};
use crate::quant::{self, QuantType};
use crate::tensor::FloatSlice;

/// An instruction-set path for the quantized kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The scalar integer twins (portable, the reference for the others).
    Scalar,
    Avx2,
    /// AVX-512 VNNI instructions on 256-bit vectors (AVX-512VL).
    Avx512Vnni,
    Neon,
    /// NEON with the dotprod extension (`sdot`).
    NeonDot,
    /// NEON with dotprod and the int8 matrix multiply extension (`smmla`,
    /// 2x2 tiles per instruction) for the 32-value types' prefill.
    NeonI8mm,
}

impl Isa {
    pub const ALL: [Isa; 6] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx512Vnni,
        Isa::Neon,
        Isa::NeonDot,
        Isa::NeonI8mm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Neon => "neon",
            Isa::NeonDot => "neon-dot",
            Isa::NeonI8mm => "neon-i8mm",
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.is_available()
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512vl")
                    && std::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => true,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => std::arch::is_aarch64_feature_detected!("dotprod"),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonI8mm => {
                std::arch::is_aarch64_feature_detected!("dotprod")
                    && std::arch::is_aarch64_feature_detected!("i8mm")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every path this CPU can run, the scalar one first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
    }

    /// The path `MLLM_QLINEAR_ISA` forces, if it is set: an unknown name,
    /// or a path this CPU cannot run, is an error (never silently ignored).
    pub fn forced() -> std::result::Result<Option<Isa>, String> {
        let Ok(v) = std::env::var("MLLM_QLINEAR_ISA") else {
            return Ok(None);
        };
        let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
        let Some(isa) = Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(v.trim()))
        else {
            return Err(format!(
                "MLLM_QLINEAR_ISA={v} names no kernel path; known: {}",
                names.join(", ")
            ));
        };
        if !isa.is_available() {
            let here: Vec<&str> = Isa::available().iter().map(|i| i.name()).collect();
            return Err(format!(
                "MLLM_QLINEAR_ISA={v}: this CPU cannot run it; available here: {}",
                here.join(", ")
            ));
        }
        Ok(Some(isa))
    }

    /// The path `linear` uses: `MLLM_QLINEAR_ISA` if set, else the fastest
    /// available. Detected once; a bad `MLLM_QLINEAR_ISA` is reported on
    /// stderr and the fastest path used (the CLI refuses it up front).
    pub fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| match Isa::forced() {
            Ok(Some(i)) => i,
            Ok(None) => *Isa::available().last().unwrap_or(&Isa::Scalar),
            Err(e) => {
                eprintln!("warning: {e}; using the fastest path");
                *Isa::available().last().unwrap_or(&Isa::Scalar)
            }
        })
    }

    /// Whether kernels outside this module (attention, `simd`, `vmath`,
    /// activation quantization) may use AVX2 + FMA + F16C: the CPU has them
    /// and `MLLM_QLINEAR_ISA` does not force `scalar`. A forced path caps
    /// every kernel, not only the quantized linears, so a forced `avx2` on
    /// an AVX-512 machine runs what an AVX2-only CPU would.
    #[inline]
    pub fn allows_avx2() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| Isa::Avx2.is_available() && Isa::forced() != Ok(Some(Isa::Scalar)))
    }

    /// Whether kernels may use AVX-512 F/BW/VL (with AVX2 + FMA + F16C):
    /// the CPU has them and no narrower path is forced. VNNI is not
    /// implied (`Isa::best()` says whether the VNNI kernels run).
    #[inline]
    pub fn allows_avx512() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                Isa::allows_avx2()
                    && std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512bw")
                    && std::is_x86_feature_detected!("avx512vl")
                    && !matches!(Isa::forced(), Ok(Some(Isa::Avx2)))
            }
            #[cfg(not(target_arch = "x86_64"))]
            false
        })
    }
}

/// A raw pointer tasks of one parallel loop write through, each to its own
/// disjoint range.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut f32);
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the Sync wrapper).
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

/// Where a kernel writes its `[m][nr]` products: output `[i][j]` at `ptr +
/// i * ld + j`. `ld` is the whole output's width, so a parallel task (or a
/// part of a merged linear) writes its columns in place; a staging block
/// and a copy cost ~9% of a K-quant prefill at 2 threads.
#[derive(Clone, Copy)]
pub(super) struct Out {
    pub(super) ptr: *mut f32,
    pub(super) ld: usize,
}

impl Out {
    /// Output `[i][j]`.
    ///
    /// # Safety
    /// `(i, j)` must lie inside the block the `Out`'s maker vouched for.
    #[inline(always)]
    pub(super) unsafe fn at(self, i: usize, j: usize) -> *mut f32 {
        self.ptr.add(i * self.ld + j)
    }
}

/// One tile of a kernel: `(ctx, first weight row, first activation row)`.
pub(super) type Tile<X> = unsafe fn(&X, usize, usize);

/// Walks `nr` weight rows by `m` activation rows in tiles of `rm` weight
/// rows (1 for the rows left over) by up to `cm` activation rows.
///
/// # Safety
/// `tile(r, c)` must be sound for every tile inside `nr x m` of `ctx`.
#[allow(dead_code)] // unused where no SIMD path is compiled
pub(super) unsafe fn drive<X>(
    ctx: &X,
    nr: usize,
    m: usize,
    rm: usize,
    cm: usize,
    tile: impl Fn(usize, usize) -> Tile<X>,
) {
    let mut j = 0;
    while j < nr {
        let r = if j + rm <= nr { rm } else { 1 };
        let mut i = 0;
        while i < m {
            let c = cm.min(m - i);
            tile(r, c)(ctx, j, i);
            i += c;
        }
        j += r;
    }
}

fn check_args(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
) -> Result<usize> {
    let bs = ty.block_size();
    if !k.is_multiple_of(bs) {
        return shape_err(
            "linear",
            format!("{k} input features are not whole {ty} blocks of {bs}"),
        );
    }
    let row_bytes = k / bs * ty.type_size();
    if n.checked_mul(row_bytes) != Some(w.len()) {
        return shape_err(
            "linear",
            format!("{} bytes of {ty} do not hold a [{n}, {k}] weight", w.len()),
        );
    }
    if m.checked_mul(k) != Some(x.len()) {
        return shape_err("linear", format!("{} inputs are not [{m}, {k}]", x.len()));
    }
    if bias.is_some_and(|b| b.len() != n) {
        return shape_err("linear", format!("bias does not have {n} values"));
    }
    if ty.is_packed() && !n.is_multiple_of(crate::quant::packed::ROWS) {
        return shape_err(
            "linear",
            format!("{ty} holds rows in groups of 16, not {n}"),
        );
    }
    Ok(row_bytes)
}

/// `out [m, n] = x [m, k] @ w^T + bias` for a weight of `n` rows of `ty`
/// blocks, with the best kernels for this CPU.
pub fn linear(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    linear_with(Isa::best(), x, m, k, w, ty, n, bias)
}

/// Below this many multiply-adds one thread does the whole product: the
/// hand-off would cost more than it saves. With rayon a hand-off cost ~10
/// us and this was 2^19; the spinning pool (`cpu::pool`) hands two tasks
/// over and back in ~0.7 us (four in ~1 us), while one activation row
/// against 2^17-2^19 weights streams 80-330 KB from memory, 6-25 us on
/// one core (~13 GB/s) and about half on two. SmolLM2-135M Q4_1 decode
/// then splits its `[576 x 576]` attention output too: `farm-bench --vs`,
/// `mllm bench -p 0 -n 512 -t 2`, wall 0.97x (6 pairs).
const PAR_MACS: usize = 1 << 16;

/// `linear` with the kernels of `isa` (which must be available; the
/// scalar twin otherwise).
#[allow(clippy::too_many_arguments)]
pub fn linear_with(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    let mut out = vec![0.0f32; m * n];
    linear_into_with(isa, x, m, k, w, ty, n, bias, &mut out)?;
    Ok(out)
}

/// `linear` writing into `out` (`m * n` values).
#[allow(clippy::too_many_arguments)]
pub fn linear_into(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    linear_into_with(Isa::best(), x, m, k, w, ty, n, bias, out)
}

#[allow(clippy::too_many_arguments)]
pub fn linear_into_with(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    check_args(x, m, k, w, ty, n, bias)?;
    let isa = if isa.is_available() { isa } else { Isa::Scalar };
    if out.len() != m * n {
        return Err(BackendError::Invalid {
            op: "linear",
            msg: format!("output of {} values for [{m}, {n}]", out.len()),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    parts::linear_parts(isa, x, m, k, &[Part { w, ty, n }], out);
    if let Some(b) = bias {
        for row in out.chunks_exact_mut(n) {
            for (o, b) in row.iter_mut().zip(b) {
                *o += b;
            }
        }
    }
    Ok(())
}

/// `out` = `x [m, k] @ w_i^T` for every part, laid back to back (`[m, n_0]`
/// then `[m, n_1]` ...): a merged q/k/v or gate/up linear, the activations
/// quantized once per kind and all rows in one parallel dispatch. Each part
/// gives exactly what `linear` gives for it alone.
pub fn linear_parts_into(
    x: &[f32],
    m: usize,
    k: usize,
    parts: &[Part],
    out: &mut [f32],
) -> Result<()> {
    for p in parts {
        check_args(x, m, k, p.w, p.ty, p.n, None)?;
    }
    let total: usize = parts.iter().map(|p| p.n).sum();
    if out.len() != m * total {
        return invalid(
            "linear",
            format!("output of {} values for {m} rows of {total}", out.len()),
        );
    }
    parts::linear_parts(Isa::best(), x, m, k, parts, out);
    Ok(())
}

/// The oracle: dequantize the weight to f32, then the f32 reference linear.
pub fn linear_ref(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: QuantType,
    n: usize,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>> {
    check_args(x, m, k, w, ty, n, bias)?;
    let wf = if ty.is_packed() {
        quant::packed::dequantize(ty, w, n, k)
    } else {
        quant::dequantize(ty, w, n * k)
    }
    .map_err(|msg| BackendError::Invalid { op: "linear", msg })?;
    Ok(super::linear::linear_ref(
        x,
        m,
        k,
        FloatSlice::F32(&wf),
        n,
        bias,
    ))
}

/// Dequantizes rows `ids` of a `[vocab, d]` table of `ty` blocks into
/// `out [ids.len(), d]` (the ids already checked against the vocabulary).
pub fn embedding_rows(
    w: &[u8],
    ty: QuantType,
    d: usize,
    ids: &[i32],
    out: &mut [f32],
) -> Result<()> {
    let Some(row_bytes) = crate::dtype::DType::Quant(ty).row_bytes(d) else {
        return shape_err(
            "embedding",
            format!("rows of {d} are not whole {ty} blocks"),
        );
    };
    if out.len() != ids.len() * d {
        return invalid("embedding", "output does not fit the ids");
    }
    if ty.is_packed() {
        return packed_rows(w, ty, d, ids, out);
    }
    for (row, &id) in out.chunks_exact_mut(d.max(1)).zip(ids) {
        let start = id as usize * row_bytes;
        let Some(bytes) = w.get(start..start + row_bytes) else {
            return invalid("embedding", format!("token id {id} is outside the table"));
        };
        quant::dequantize_into(ty, bytes, row).map_err(|msg| BackendError::Invalid {
            op: "embedding",
            msg,
        })?;
    }
    Ok(())
}

/// `embedding_rows` of an interleaved table: each row gathered back into
/// plain blocks (in a per-thread buffer), then dequantized.
fn packed_rows(w: &[u8], ty: QuantType, d: usize, ids: &[i32], out: &mut [f32]) -> Result<()> {
    thread_local! {
        static ROW: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let plain = quant::packed::plain_of(ty).unwrap_or(ty);
    let row_bytes = d / plain.block_size() * plain.type_size();
    let n = w.len() / row_bytes.max(1);
    let mut buf = ROW.take();
    crate::cpu::refill(&mut buf, row_bytes, 0);
    let err = |msg| BackendError::Invalid {
        op: "embedding",
        msg,
    };
    let r = out
        .chunks_exact_mut(d.max(1))
        .zip(ids)
        .try_for_each(|(row, &id)| {
            quant::packed::row_blocks(ty, w, n, d, id as usize, &mut buf).map_err(err)?;
            quant::dequantize_into(plain, &buf, row).map_err(err)
        });
    ROW.set(buf);
    r
}
