//! What llama.cpp's converter did to a tensor beyond renaming it, and how
//! `GgufWeights` undoes it (`Fix`), per architecture:
//!
//! * Llama / SmolLM3: Q/K rows permuted for its rotary layout
//!   (`LlamaModel.permute`).
//! * Gemma 2/3 and Qwen3.5: RMSNorm weights that scale by 1 + w stored as
//!   1 + w (Qwen3.5's DeltaNet norm, which scales by w, is not).
//! * Qwen3.5 (conversion/qwen.py, `Qwen3NextModel` and
//!   `_LinearAttentionVReorderBase`): `A_log` stored as -exp(A_log); the
//!   conv1d weight [C, 1, K] squeezed to [C, K]; and, when a key head serves
//!   several value heads, the value heads of every DeltaNet tensor moved from
//!   grouped order (by key head: k0v0 k0v1 k1v0 k1v1) to tiled order (k0v0
//!   k1v0 k0v1 k1v1), for ggml's broadcasting: rows of the V part of
//!   `in_proj_qkv` and of the conv, of `in_proj_z`, `in_proj_a`, `in_proj_b`,
//!   elements of `A_log` and `dt_bias`, columns of `out_proj`.
//! * Any MoE with a gated shared expert: the gate stored 1-D (see `fix`).

use super::family::{family, Family};
use super::{GgufFile, GgufTensorInfo};
use crate::error::{ConvertError, Result};

/// What the file's family says (family/): q/k rows llama.cpp's converter
/// permuted (`LlamaModel.permute`: per head, rows `[half 0 | half 1]`
/// interleaved); norms stored as 1 + w (its converter adds 1 to every
/// RMSNorm weight, `*norm.weight`, since their norms scale by `1 + w`:
/// loading subtracts it. The f32 GGUF value is g = fl(1 + w); g - 1 is
/// exact for g in [0.5, 2] (Sterbenz), so the script's `1 + (g - 1)` is g
/// again, the very factor transformers computes; for w < -0.5 it is
/// within 2^-25 of it); Gated DeltaNet tensors.
fn says(fam: Option<&Family>, flag: fn(&Family) -> bool) -> bool {
    fam.is_some_and(flag)
}

/// A value-wise correction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum ValueFix {
    #[default]
    None,
    /// Stored as 1 + w.
    MinusOne,
    /// Stored as -exp(x) (Qwen3.5's `A_log`): x = ln(-v).
    LogOfNegated,
}

/// How to turn a GGUF tensor into the Hugging Face one.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Fix {
    /// The GGUF row (outermost index) of each HF row, when rows moved.
    pub rows: Option<Vec<usize>>,
    /// The GGUF column (innermost index) of each HF column, in every row.
    pub cols: Option<Vec<usize>>,
    pub value: ValueFix,
    /// The HF shape, where it differs from the GGUF one (same elements).
    pub shape: Option<Vec<usize>>,
}

impl Fix {
    /// Whether the values change (so blocks cannot be handed out as stored).
    pub fn changes_values(&self) -> bool {
        self.cols.is_some() || self.value != ValueFix::None
    }
}

/// `src` as rows of `row` items, gathered in `order` (GGUF row per output row).
pub(super) fn gather_rows<T: Copy>(src: &[T], row: usize, order: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(src.len());
    for &r in order {
        out.extend_from_slice(&src[r * row..(r + 1) * row]);
    }
    out
}

/// Every row of `src` (rows of `order.len()` items) with its items gathered
/// in `order`.
pub(super) fn gather_cols<T: Copy>(src: &[T], order: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(src.len());
    for row in src.chunks_exact(order.len().max(1)) {
        out.extend(order.iter().map(|&c| row[c]));
    }
    out
}

/// The row order undoing llama.cpp's `permute(w, n_head)` of `rows` rows:
/// within each head of `hd` rows, GGUF row `2 i + j` holds HF row
/// `j * hd / 2 + i` (`j` in 0..2).
pub(super) fn llama_rows(rows: usize, n_head: usize) -> Vec<usize> {
    let hd = rows / n_head.max(1);
    let mut out = Vec::with_capacity(rows);
    for h in 0..n_head {
        for j in 0..2 {
            for i in 0..hd / 2 {
                out.push(h * hd + 2 * i + j);
            }
        }
    }
    out
}

/// The GGUF index of each HF index over `hk * r` value heads of `d` items,
/// moved from grouped (`[hk, r, d]`) to tiled (`[r, hk, d]`) order.
fn tiled_to_grouped(hk: usize, r: usize, d: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(hk * r * d);
    for k in 0..hk {
        for j in 0..r {
            out.extend((0..d).map(|e| (j * hk + k) * d + e));
        }
    }
    out
}

/// The metadata `Fixer` works from, read once per file.
pub(super) struct Fixer {
    arch: String,
    /// The registry's entry for `arch`, if any.
    family: Option<&'static Family>,
    path: String,
    /// (query heads, key/value heads), for Llama's Q/K permutation.
    heads: Option<(Option<usize>, Option<usize>)>,
    /// Qwen3.5's DeltaNet: (key heads, value heads per key head, key head
    /// dim, value head dim), when value heads were reordered.
    deltanet: Option<(usize, usize, usize, usize)>,
}

impl Fixer {
    pub fn new(file: &GgufFile) -> Result<Fixer> {
        let arch = file.architecture().unwrap_or("").to_string();
        let fam = family(&arch);
        let path = file.path().display().to_string();
        let positive = |key: &str| -> Result<Option<usize>> {
            Ok(match file.arch_meta(key) {
                None => None,
                Some(v) => Some(v.as_u64().filter(|&h| h > 0).ok_or_else(|| {
                    ConvertError::Corrupt(format!(
                        "{path}: {arch}.{key} must be a positive integer, found {v:?}"
                    ))
                })? as usize),
            })
        };
        let heads = if says(fam, |f| f.permuted_qk) {
            let h = positive("attention.head_count")?;
            Some((h, positive("attention.head_count_kv")?.or(h)))
        } else {
            None
        };
        let mut deltanet = None;
        if says(fam, |f| f.delta_net) {
            let need = |key: &str| -> Result<usize> {
                positive(key)?.ok_or_else(|| {
                    ConvertError::Corrupt(format!("{path}: metadata {arch}.{key} is missing"))
                })
            };
            let (hk, hv) = (need("ssm.group_count")?, need("ssm.time_step_rank")?);
            let (dk, inner) = (need("ssm.state_size")?, need("ssm.inner_size")?);
            if hv % hk != 0 || inner % hv != 0 {
                return Err(ConvertError::Corrupt(format!(
                    "{path}: {hv} value heads ({arch}.ssm.time_step_rank) of {inner} values in all do not group under {hk} key heads"
                )));
            }
            // The converter reorders only when the head counts differ; with
            // one key head the two orders are the same.
            if hk > 1 && hk != hv {
                deltanet = Some((hk, hv / hk, dk, inner / hv));
            }
        }
        Ok(Fixer {
            arch,
            family: fam,
            path,
            heads,
            deltanet,
        })
    }

    /// The fix of tensor `t`.
    pub fn fix(&self, t: &GgufTensorInfo) -> Result<Fix> {
        let mut fix = Fix::default();
        let part = block_part(&t.name);
        if says(self.family, |f| f.norm_plus_one)
            && t.name.ends_with("norm.weight")
            && part != Some("ssm_norm.weight")
        {
            fix.value = ValueFix::MinusOne;
        }
        // The shared-expert gate [1, hidden] (Qwen2-MoE, Qwen3.5-MoE): ggml
        // shapes drop trailing 1s, so files hold it as [1, hidden] (the
        // converter's) or [hidden] (llama-quantize's output), and
        // llama.cpp's loaders take either.
        if part == Some("ffn_gate_inp_shexp.weight") && t.shape.len() == 1 {
            fix.shape = Some(vec![1, t.shape[0]]);
        }
        let rows = t.shape.first().copied().unwrap_or(1);
        if let Some((n_head, n_head_kv)) = self.heads {
            let heads = match part {
                Some("attn_q.weight" | "attn_q.bias") => Some(n_head),
                Some("attn_k.weight" | "attn_k.bias") => Some(n_head_kv),
                _ => None,
            };
            if let Some(h) = heads {
                let h = h.ok_or_else(|| {
                    self.corrupt(
                        t,
                        format!(
                            "needs {}.attention.head_count to undo llama.cpp's row permutation",
                            self.arch
                        ),
                    )
                })?;
                if rows % h != 0 || (rows / h) % 2 != 0 {
                    return Err(self.corrupt(
                        t,
                        format!("has {rows} rows, which {h} heads of even size cannot share"),
                    ));
                }
                fix.rows = Some(llama_rows(rows, h));
            }
        }
        if says(self.family, |f| f.delta_net) {
            self.qwen35(t, part, &mut fix)?;
        }
        Ok(fix)
    }

    fn corrupt(&self, t: &GgufTensorInfo, what: String) -> ConvertError {
        ConvertError::Corrupt(format!("{}: `{}` {what}", self.path, t.name))
    }

    fn qwen35(&self, t: &GgufTensorInfo, part: Option<&str>, fix: &mut Fix) -> Result<()> {
        let Some(part) = part else { return Ok(()) };
        let rows = t.shape.first().copied().unwrap_or(1);
        if part == "ssm_a" {
            fix.value = ValueFix::LogOfNegated;
        }
        if part == "ssm_conv1d.weight" {
            if t.shape.len() != 2 {
                return Err(self.corrupt(
                    t,
                    format!("should be [channels, kernel], found {:?}", t.shape),
                ));
            }
            fix.shape = Some(vec![t.shape[0], 1, t.shape[1]]);
        }
        let Some((hk, r, dk, dv)) = self.deltanet else {
            return Ok(());
        };
        let value_dim = hk * r * dv;
        // (items before the value heads, value head size) of the reordered
        // dimension: rows, or columns for out_proj.
        let (skip, d, along_cols) = match part {
            "attn_qkv.weight" | "ssm_conv1d.weight" => (2 * hk * dk, dv, false),
            "attn_gate.weight" => (0, dv, false),
            "ssm_alpha.weight" | "ssm_beta.weight" | "ssm_a" | "ssm_dt.bias" => (0, 1, false),
            "ssm_out.weight" => (0, dv, true),
            _ => return Ok(()),
        };
        let n = match along_cols {
            true => t.shape.last().copied().unwrap_or(0),
            false => rows,
        };
        if n != skip + hk * r * d {
            return Err(self.corrupt(
                t,
                format!(
                    "has {n} {}, expected {} for {hk} key heads of {dk} and {} value heads of {dv} ({value_dim} values)",
                    if along_cols { "columns" } else { "rows" },
                    skip + hk * r * d,
                    hk * r,
                ),
            ));
        }
        let order: Vec<usize> = (0..skip)
            .chain(tiled_to_grouped(hk, r, d).into_iter().map(|i| skip + i))
            .collect();
        match along_cols {
            true => fix.cols = Some(order),
            false => fix.rows = Some(order),
        }
        Ok(())
    }
}

/// `attn_q.weight` for `blk.3.attn_q.weight`; `ssm_a` for `blk.0.ssm_a`.
fn block_part(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("blk.")?;
    let (n, tail) = rest.split_once('.')?;
    n.bytes().all(|b| b.is_ascii_digit()).then_some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_dimensional_shared_expert_gate_gets_its_row_back() {
        let fixer = Fixer {
            arch: "qwen35moe".into(),
            family: family("qwen35moe"),
            path: "f.gguf".into(),
            heads: None,
            deltanet: None,
        };
        let info = |name: &str, shape: Vec<usize>| GgufTensorInfo {
            name: name.into(),
            shape,
            ggml_type: super::super::GgmlType::from_id(0).expect("f32"),
            offset: 0,
            len: 0,
        };
        let gate = "blk.3.ffn_gate_inp_shexp.weight";
        let fix = |t| fixer.fix(&t).expect("fix").shape;
        assert_eq!(fix(info(gate, vec![2048])), Some(vec![1, 2048]));
        assert_eq!(fix(info(gate, vec![1, 2048])), None);
        assert_eq!(fix(info("blk.3.ffn_gate_inp.weight", vec![2048])), None);
    }

    /// llama.cpp's `_reorder_v_heads` as its Python writes it: view
    /// [hk, r, d], swap the first two, flatten. Ours must be its inverse.
    fn reorder_v_heads(x: &[usize], hk: usize, r: usize, d: usize) -> Vec<usize> {
        let mut out = vec![0; x.len()];
        for k in 0..hk {
            for j in 0..r {
                for e in 0..d {
                    out[(j * hk + k) * d + e] = x[(k * r + j) * d + e];
                }
            }
        }
        out
    }

    #[test]
    fn value_head_order_undoes_the_converters_reorder() {
        for (hk, r, d) in [(2, 2, 3), (3, 4, 1), (1, 3, 2), (4, 1, 5)] {
            let hf: Vec<usize> = (0..hk * r * d).map(|i| 1000 + i).collect();
            let gguf = reorder_v_heads(&hf, hk, r, d);
            let back = gather_rows(&gguf, 1, &tiled_to_grouped(hk, r, d));
            assert_eq!(back, hf, "hk {hk} r {r} d {d}");
            if hk > 1 && r > 1 {
                assert_ne!(gguf, hf, "the reorder should move something");
            }
        }
    }

    #[test]
    fn llama_rows_undo_the_permutation() {
        // llama.cpp's permute: w.reshape(h, 2, hd/2, ...).swapaxes(1, 2).
        let (h, hd) = (3, 4);
        let hf: Vec<usize> = (0..h * hd).collect();
        let mut gguf = vec![0; h * hd];
        for head in 0..h {
            for j in 0..2 {
                for i in 0..hd / 2 {
                    gguf[head * hd + 2 * i + j] = hf[head * hd + j * hd / 2 + i];
                }
            }
        }
        assert_eq!(gather_rows(&gguf, 1, &llama_rows(h * hd, h)), hf);
    }

    #[test]
    fn columns_gather_within_each_row() {
        let m = [1, 2, 3, 4, 5, 6];
        assert_eq!(gather_cols(&m, &[2, 0, 1]), [3, 1, 2, 6, 4, 5]);
    }
}
