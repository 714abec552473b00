//! ggml types mllm reads from GGUF files but has no kernels of their own:
//! TQ1_0 (ternary BitNet-style models) and the
//! grid "i-quants" IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
//! (llama-quantize's IQ1..IQ3 files; their grids are generated from
//! gguf-py's, `iq_grids`).
//!
//! Each has a scalar reference dequantizer that equals gguf-py's
//! `gguf.quants.dequantize` bit for bit (tests/fixtures/quants). At load a
//! tensor takes one of two routes, both exact with respect to the file's
//! values:
//!
//! - a lossless repack into a type that has fast kernels (`runs_as`),
//!   where that type computes the very same f32 values: TQ1_0 into TQ2_0
//!   (the same f16 `d` per 256 values, the ternary values plus one as the
//!   2-bit codes); IQ3_S into Q6_K (the same `d`, its
//!   odd sub-block scale as Q6_K's i8 scale, `grid * sign` as the code);
//!   IQ3_XXS, IQ1_S and IQ1_M into `QuantType::Q6KScaled`, Q6_K blocks
//!   of twice (IQ3_XXS) or 8 times (IQ1) their values whose products the
//!   kernels scale back by that power of two (their steps of `d / 2` and
//!   `d / 8` are not f16s for a small `d`; `iq1`, `iq3`); IQ2_XXS, IQ2_XS
//!   and IQ2_S likewise into `QuantType::Q8KS { shift: 3 }`, whose 8-bit
//!   codes hold their grid values up to 43 (`iq2`, `q8_ks`). Memory grows
//!   (TQ1_0 1.69 -> 2.06, IQ3_S 3.44, IQ3_XXS 3.06 and IQ1
//!   1.56-1.75 -> 6.56, IQ2 2.06-2.56 -> 8.56 bits per weight), the
//!   kernels are the tested ones.
//! - f32 values (`dequantize`) for a type no kernel type holds exactly:
//!   none today. MXFP4 was one (its e8m0 scale spans 2^-128..2^127,
//!   beyond an f16's range) until it got its own kernel, as IQ4_XS, Q2_K,
//!   Q3_K, Q5_0, Q5_1 and IQ4_NL did before it and TQ2_0 after it
//!   (`QuantType`: no longer imported but computed in their own blocks;
//!   TQ2_0 ran as Q3_K, 3.44 bits a weight).

use rayon::prelude::*;

use super::{block_count, QuantType, QK, QK_K};
use super::{iq1, iq2, iq3, tq};

/// A ggml type mllm imports from a file (see the module documentation).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImportType {
    TQ1_0,
    IQ2_XXS,
    IQ2_XS,
    IQ2_S,
    IQ3_XXS,
    IQ3_S,
    IQ1_S,
    IQ1_M,
}

/// Blocks per parallel task when repacking or dequantizing a large tensor.
const PAR_BLOCKS: usize = 1024;

impl ImportType {
    pub const ALL: [ImportType; 8] = [
        ImportType::TQ1_0,
        ImportType::IQ2_XXS,
        ImportType::IQ2_XS,
        ImportType::IQ2_S,
        ImportType::IQ3_XXS,
        ImportType::IQ3_S,
        ImportType::IQ1_S,
        ImportType::IQ1_M,
    ];

    /// ggml's spelling.
    pub fn name(self) -> &'static str {
        match self {
            ImportType::TQ1_0 => "TQ1_0",
            ImportType::IQ2_XXS => "IQ2_XXS",
            ImportType::IQ2_XS => "IQ2_XS",
            ImportType::IQ2_S => "IQ2_S",
            ImportType::IQ3_XXS => "IQ3_XXS",
            ImportType::IQ3_S => "IQ3_S",
            ImportType::IQ1_S => "IQ1_S",
            ImportType::IQ1_M => "IQ1_M",
        }
    }

    /// The `ggml_type` number GGUF files store.
    pub fn ggml_type_id(self) -> u32 {
        match self {
            ImportType::TQ1_0 => 34,
            ImportType::IQ2_XXS => 16,
            ImportType::IQ2_XS => 17,
            ImportType::IQ2_S => 22,
            ImportType::IQ3_XXS => 18,
            ImportType::IQ3_S => 21,
            ImportType::IQ1_S => 19,
            ImportType::IQ1_M => 29,
        }
    }

    pub fn from_ggml_type_id(id: u32) -> Option<ImportType> {
        ImportType::ALL.into_iter().find(|t| t.ggml_type_id() == id)
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            ImportType::TQ1_0
            | ImportType::IQ2_XXS
            | ImportType::IQ2_XS
            | ImportType::IQ2_S
            | ImportType::IQ3_XXS
            | ImportType::IQ3_S
            | ImportType::IQ1_S
            | ImportType::IQ1_M => QK_K,
        }
    }

    /// Byte offsets of a block's f16 scales (none for IQ1_M's scale spread
    /// over its nibbles): where tests write finite scales over random
    /// bytes.
    pub fn scale_offsets(self) -> &'static [usize] {
        match self {
            ImportType::TQ1_0 => &[52],
            ImportType::IQ1_M => &[],
            ImportType::IQ2_XXS
            | ImportType::IQ2_XS
            | ImportType::IQ2_S
            | ImportType::IQ3_XXS
            | ImportType::IQ3_S
            | ImportType::IQ1_S => &[0],
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            ImportType::TQ1_0 => tq::BlockTQ1_0::SIZE,
            ImportType::IQ2_XXS => iq2::BlockIQ2XXS::SIZE,
            ImportType::IQ2_XS => iq2::BlockIQ2XS::SIZE,
            ImportType::IQ2_S => iq2::BlockIQ2S::SIZE,
            ImportType::IQ3_XXS => iq3::BlockIQ3XXS::SIZE,
            ImportType::IQ3_S => iq3::BlockIQ3S::SIZE,
            ImportType::IQ1_S => iq1::BlockIQ1S::SIZE,
            ImportType::IQ1_M => iq1::BlockIQ1M::SIZE,
        }
    }

    /// Storage cost in the file, scales included (TQ1_0: 1.6875).
    pub fn bits_per_weight(self) -> f64 {
        (self.type_size() * 8) as f64 / self.block_size() as f64
    }

    /// The type whose kernels compute this one after `repack`, if one
    /// holds its values exactly; `None`: the tensor loads as f32 values.
    pub fn runs_as(self) -> Option<QuantType> {
        match self {
            ImportType::TQ1_0 => Some(QuantType::TQ2_0),
            ImportType::IQ3_S => Some(QuantType::Q6_K),
            ImportType::IQ3_XXS => Some(QuantType::Q6KScaled { shift: 1 }),
            ImportType::IQ1_S | ImportType::IQ1_M => Some(QuantType::Q6KScaled { shift: 3 }),
            ImportType::IQ2_XXS | ImportType::IQ2_XS | ImportType::IQ2_S => {
                Some(QuantType::Q8KS { shift: 3 })
            }
        }
    }

    /// The reference dequantizer of whole blocks (the `dequantize_row_*`).
    fn dequantize_blocks(self, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
        match self {
            ImportType::TQ1_0 => tq::dequantize_row_tq1_0(bytes, out),
            ImportType::IQ2_XXS => iq2::dequantize_row_iq2_xxs(bytes, out),
            ImportType::IQ2_XS => iq2::dequantize_row_iq2_xs(bytes, out),
            ImportType::IQ2_S => iq2::dequantize_row_iq2_s(bytes, out),
            ImportType::IQ3_XXS => iq3::dequantize_row_iq3_xxs(bytes, out),
            ImportType::IQ3_S => iq3::dequantize_row_iq3_s(bytes, out),
            ImportType::IQ1_S => iq1::dequantize_row_iq1_s(bytes, out),
            ImportType::IQ1_M => iq1::dequantize_row_iq1_m(bytes, out),
        }
    }

    /// Dequantizes `bytes` (whole blocks) into `out`, in parallel for large
    /// inputs; the same values as the row functions (blocks are independent).
    pub fn dequantize_into(self, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
        let (bs, ts) = (self.block_size(), self.type_size());
        let blocks = block_count(self.name(), bs, ts, bytes.len(), out.len())?;
        let per_task = (PAR_BLOCKS * QK).div_ceil(bs);
        if blocks <= per_task {
            return self.dequantize_blocks(bytes, out);
        }
        out.par_chunks_mut(per_task * bs)
            .zip(bytes.par_chunks(per_task * ts))
            .try_for_each(|(o, b)| self.dequantize_blocks(b, o))
    }

    /// `n_elements` f32 values of `bytes`, which must be exactly their blocks.
    pub fn dequantize(self, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, String> {
        let (bs, ts) = (self.block_size(), self.type_size());
        block_count(self.name(), bs, ts, bytes.len(), n_elements)?;
        if n_elements > crate::tensor::MAX_ELEMENTS {
            return Err(format!(
                "{self}: {n_elements} values is more than one tensor may hold"
            ));
        }
        let mut out = vec![0.0f32; n_elements];
        self.dequantize_into(bytes, &mut out)?;
        Ok(out)
    }

    /// Rewrites `bytes` (whole blocks) as blocks of `runs_as()`, holding
    /// the same values; an error for the types that have none.
    pub fn repack(self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        type Repack = fn(&[u8], &mut [u8]) -> Result<(), String>;
        let (to, repack): (QuantType, Repack) = match self {
            ImportType::TQ1_0 => (QuantType::TQ2_0, tq::repack_tq1_0_to_tq2_0),
            ImportType::IQ3_S => (QuantType::Q6_K, iq3::repack_iq3_s_to_q6_k),
            ImportType::IQ3_XXS => (
                QuantType::Q6KScaled { shift: 1 },
                iq3::repack_iq3_xxs_to_q6_k,
            ),
            ImportType::IQ1_S => (QuantType::Q6KScaled { shift: 3 }, iq1::repack_iq1_s_to_q6_k),
            ImportType::IQ1_M => (QuantType::Q6KScaled { shift: 3 }, iq1::repack_iq1_m_to_q6_k),
            ImportType::IQ2_XXS => (QuantType::Q8KS { shift: 3 }, iq2::repack_iq2_xxs_to_q8_ks),
            ImportType::IQ2_XS => (QuantType::Q8KS { shift: 3 }, iq2::repack_iq2_xs_to_q8_ks),
            ImportType::IQ2_S => (QuantType::Q8KS { shift: 3 }, iq2::repack_iq2_s_to_q8_ks),
        };
        debug_assert_eq!(self.runs_as(), Some(to));
        let ts = self.type_size();
        if !bytes.len().is_multiple_of(ts) {
            return Err(format!(
                "{self}: {} bytes are not a whole number of {ts}-byte blocks",
                bytes.len()
            ));
        }
        let per_block = self.block_size() / to.block_size() * to.type_size();
        let mut out = vec![0u8; bytes.len() / ts * per_block];
        repack(bytes, &mut out)?;
        Ok(out)
    }
}

impl std::fmt::Display for ImportType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `out[i] = f(src[i])` over whole blocks of `I` bytes into blocks of `O`
/// bytes, in parallel for large inputs; an error (never a panic) when the
/// lengths are not whole, matching blocks.
pub(crate) fn map_blocks<const I: usize, const O: usize>(
    name: &str,
    src: &[u8],
    out: &mut [u8],
    f: impl Fn(&[u8; I]) -> [u8; O] + Sync,
) -> Result<(), String> {
    if !src.len().is_multiple_of(I) {
        return Err(format!(
            "{name}: {} bytes are not a whole number of {I}-byte blocks",
            src.len()
        ));
    }
    let n = src.len() / I;
    if n.checked_mul(O) != Some(out.len()) {
        return Err(format!(
            "{name}: {n} blocks need {} output bytes, not {}",
            n.saturating_mul(O),
            out.len()
        ));
    }
    let (src, _) = src.as_chunks::<I>();
    let (out, _) = out.as_chunks_mut::<O>();
    src.par_iter()
        .zip(out.par_iter_mut())
        .with_min_len(PAR_BLOCKS)
        .for_each(|(s, o)| *o = f(s));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of `ty` whose bytes walk through every value, with finite
    /// f16 scales of both signs written over the scale fields.
    fn patterned(ty: ImportType, blocks: usize) -> Vec<u8> {
        let ts = ty.type_size();
        let mut b: Vec<u8> = (0..blocks * ts).map(|i| (i * 37 + 11) as u8).collect();
        let at = ty.scale_offsets();
        for (k, blk) in b.chunks_exact_mut(ts).enumerate() {
            for &a in at {
                let d = half::f16::from_f32(0.01 * (k as f32 - 3.5));
                blk[a..a + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn repacks_keep_every_value_bit_for_bit() {
        for ty in ImportType::ALL {
            let blocks = 9;
            let src = patterned(ty, blocks);
            let n = blocks * ty.block_size();
            let want = ty.dequantize(&src, n).unwrap();
            match ty.runs_as() {
                Some(to) => {
                    let got = super::super::dequantize(to, &ty.repack(&src).unwrap(), n).unwrap();
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{ty} as {to}");
                }
                None => assert!(ty.repack(&src).is_err(), "{ty}"),
            }
        }
    }

    #[test]
    fn large_inputs_take_the_parallel_path_with_the_same_values() {
        for ty in ImportType::ALL {
            let blocks = 2 * PAR_BLOCKS * QK / ty.block_size() + 3;
            let src = patterned(ty, blocks);
            let n = blocks * ty.block_size();
            let mut serial = vec![0.0f32; n];
            ty.dequantize_blocks(&src, &mut serial).unwrap();
            let par = ty.dequantize(&src, n).unwrap();
            assert!(serial
                .iter()
                .zip(&par)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            if ty.runs_as().is_some() {
                let whole = ty.repack(&src).unwrap();
                let ts = ty.type_size();
                let first = ty.repack(&src[..ts]).unwrap();
                assert_eq!(&whole[..first.len()], &first[..], "{ty}");
            }
        }
    }
}
