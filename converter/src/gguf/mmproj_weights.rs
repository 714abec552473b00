//! The tensors of a llama.cpp vision-language pair under transformers'
//! names. `MmprojWeights`: an mmproj file's tower under the checkpoint's
//! names: Qwen3-VL's at `model.visual.*` (names from gguf-py's MMPROJ table
//! and conversion/qwen3vl.py, read backwards; the one layout change the
//! converter made, the Conv3d patch kernel split along time into 2-D
//! kernels `v.patch_embd.weight`, `.weight.1`, is undone by stacking them
//! again), or another tower's map (DeepSeek-OCR 2's: mmproj_deepseek.rs).
//! `VisionLanguageWeights`: that tower beside the text GGUF's decoder,
//! moved under `model.language_model.` where the VL checkpoint names it so.

use mllm_backends::weights::{TensorInfo, WeightSource};
use mllm_backends::{DType, Tensor};

use super::{GgufFile, GgufWeights};
use crate::error::{ConvertError, Result};

const VISUAL: &str = "model.visual.";
const LANGUAGE: &str = "model.language_model.";

/// Tensors of vision block N: `v.blk.N.{gguf}` is `blocks.N.{hf}`.
const BLOCK: &[(&str, &str)] = &[
    ("ln1", "norm1"),
    ("ln2", "norm2"),
    ("attn_qkv", "attn.qkv"),
    ("attn_out", "attn.proj"),
    ("ffn_up", "mlp.linear_fc1"),
    ("ffn_down", "mlp.linear_fc2"),
];

/// Tensors outside the blocks: (GGUF stem, HF stem under `model.visual.`).
/// The merger's two linears are `mm.0` / `mm.2` (Qwen2-VL's indices).
const GLOBAL: &[(&str, &str)] = &[
    ("v.patch_embd", "patch_embed.proj"),
    ("v.position_embd", "pos_embed"),
    ("v.post_ln", "merger.norm"),
    ("mm.0", "merger.linear_fc1"),
    ("mm.2", "merger.linear_fc2"),
];

/// Tensors of a DeepStack merger: `v.deepstack.L.{gguf}`, where L is the
/// vision block it reads (not its place in the list).
const DEEPSTACK: &[(&str, &str)] = &[
    ("norm", "norm"),
    ("fc1", "linear_fc1"),
    ("fc2", "linear_fc2"),
];

/// The temporal slices of the patch kernel: `v.patch_embd.weight`, then
/// `v.patch_embd.weight.1`, ...
fn kernel_slice(t: usize) -> String {
    match t {
        0 => "v.patch_embd.weight".into(),
        t => format!("v.patch_embd.weight.{t}"),
    }
}

/// The HF name (under `model.visual.`) of mmproj tensor `g`; `deepstack`
/// lists the blocks the DeepStack mergers read, in order. Kernel slices
/// past the first have none (they join the first).
fn hf_name(g: &str, deepstack: &[usize]) -> Option<String> {
    let (stem, suffix) = g.rsplit_once('.')?;
    if !matches!(suffix, "weight" | "bias") {
        return None;
    }
    if let Some(&(_, hf)) = GLOBAL.iter().find(|(s, _)| *s == stem) {
        return Some(format!("{hf}.{suffix}"));
    }
    if let Some(rest) = stem.strip_prefix("v.blk.") {
        let (n, part) = rest.split_once('.')?;
        let n: usize = n.parse().ok()?;
        let &(_, hf) = BLOCK.iter().find(|(s, _)| *s == part)?;
        return Some(format!("blocks.{n}.{hf}.{suffix}"));
    }
    let rest = stem.strip_prefix("v.deepstack.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let j = deepstack.iter().position(|&l| l == layer)?;
    let &(_, hf) = DEEPSTACK.iter().find(|(s, _)| *s == part)?;
    Some(format!("deepstack_merger_list.{j}.{hf}.{suffix}"))
}

/// Where a vision tensor comes from.
pub(super) enum Source {
    /// One mmproj tensor (its GGUF name) as it is.
    Tensor(String),
    /// One mmproj tensor with its values as one row (the converter stored
    /// a 1-D parameter as [1, n]).
    Flat(String),
    /// The patch kernel: this many 2-D slices stacked along time.
    Kernel(usize),
}

/// An mmproj file's tower under the checkpoint's names.
pub struct MmprojWeights {
    file: GgufWeights,
    /// HF name -> source, sorted.
    map: std::collections::BTreeMap<String, Source>,
}

impl MmprojWeights {
    /// `file`'s tensors under the names of `map` (HF name -> source).
    pub(super) fn from_map(
        file: GgufWeights,
        map: std::collections::BTreeMap<String, Source>,
    ) -> MmprojWeights {
        MmprojWeights { file, map }
    }

    /// Whether `name` is one of the tower's tensors.
    fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Qwen3-VL's tower at `model.visual.*`: maps every tensor of `file`;
    /// one with no place in the tower (or a DeepStack merger of a block
    /// `deepstack` does not list) is refused.
    pub fn new(file: GgufFile, deepstack: &[usize]) -> Result<MmprojWeights> {
        let path = file.path().display().to_string();
        let file = GgufWeights::new(file)?;
        let slices = (0..)
            .take_while(|&t| file.info(&kernel_slice(t)).is_some())
            .count();
        let mut map = std::collections::BTreeMap::new();
        for g in file.names() {
            if g.starts_with("v.patch_embd.weight.") {
                continue;
            }
            let hf = hf_name(&g, deepstack).ok_or_else(|| {
                ConvertError::Unsupported(format!(
                    "{path}: tensor `{g}` has no place in Qwen3-VL's vision tower"
                ))
            })?;
            let src = if g == kernel_slice(0) {
                Source::Kernel(slices)
            } else {
                Source::Tensor(g)
            };
            map.insert(format!("{VISUAL}{hf}"), src);
        }
        Ok(MmprojWeights { file, map })
    }

    /// The kernel [out, in, T, p, p] from its T slices [out, in, p, p]: for
    /// each (out, in) pair, slice 0's p x p values, then slice 1's, ...
    fn load_kernel(&self, slices: usize) -> std::result::Result<Tensor, String> {
        let parts = (0..slices)
            .map(|t| {
                self.file
                    .load(&kernel_slice(t))?
                    .to_f32_vec()
                    .map_err(|e| e.to_string())
            })
            .collect::<std::result::Result<Vec<Vec<f32>>, String>>()?;
        let shape = self.kernel_shape(slices)?;
        let pp = shape[3] * shape[4];
        let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
        for pair in 0..shape[0] * shape[1] {
            for p in &parts {
                out.extend_from_slice(&p[pair * pp..(pair + 1) * pp]);
            }
        }
        Tensor::from_f32(out, shape).map_err(|e| e.to_string())
    }

    fn kernel_shape(&self, slices: usize) -> std::result::Result<Vec<usize>, String> {
        let shapes: Vec<Vec<usize>> = (0..slices)
            .filter_map(|t| self.file.info(&kernel_slice(t)).map(|i| i.shape))
            .collect();
        match &shapes[..] {
            [first, rest @ ..] if first.len() == 4 && rest.iter().all(|s| s == first) => {
                Ok(vec![first[0], first[1], slices, first[2], first[3]])
            }
            _ => Err(format!(
                "{}: the patch kernel slices v.patch_embd.weight* have shapes {shapes:?}, not {slices} equal [out, in, p, p]",
                self.file.file().path().display()
            )),
        }
    }
}

impl WeightSource for MmprojWeights {
    fn describe(&self) -> String {
        format!(
            "the mmproj file {} ({} tensors)",
            self.file.file().path().display(),
            self.map.len()
        )
    }

    fn names(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        match self.map.get(name)? {
            Source::Tensor(g) => self.file.info(g),
            Source::Flat(g) => self.file.info(g).map(|i| TensorInfo {
                shape: vec![i.shape.iter().product()],
                ..i
            }),
            Source::Kernel(n) => Some(TensorInfo {
                dtype: DType::F32,
                shape: self.kernel_shape(*n).ok()?,
            }),
        }
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        let src = self
            .map
            .get(name)
            .ok_or_else(|| format!("no tensor `{name}`"))?;
        match src {
            Source::Tensor(g) => self.file.load(g),
            Source::Flat(g) => {
                let t = self.file.load(g)?;
                let n = t.shape().iter().product();
                t.reshaped(vec![n]).map_err(|e| e.to_string())
            }
            Source::Kernel(n) => self.load_kernel(*n),
        }
    }
}

/// A text GGUF and its mmproj under one VL checkpoint's names: the
/// tower's from the mmproj; the text file's `model.*` under `text_prefix`
/// when the checkpoint nests its decoder (Qwen-VL's
/// `model.language_model.*`), else as they are; `lm_head.*` as the text
/// file names it.
pub struct VisionLanguageWeights {
    text: GgufWeights,
    vision: MmprojWeights,
    text_prefix: Option<&'static str>,
}

impl VisionLanguageWeights {
    /// Qwen-VL's layout: the decoder under `model.language_model.`.
    pub fn new(text: GgufWeights, vision: MmprojWeights) -> VisionLanguageWeights {
        Self::with_text_prefix(text, vision, Some(LANGUAGE))
    }

    pub(super) fn with_text_prefix(
        text: GgufWeights,
        vision: MmprojWeights,
        text_prefix: Option<&'static str>,
    ) -> VisionLanguageWeights {
        VisionLanguageWeights {
            text,
            vision,
            text_prefix,
        }
    }

    /// `GgufWeights::set_dequantize` for both files.
    pub fn set_dequantize(&mut self, dequantize: bool) {
        self.text.set_dequantize(dequantize);
        self.vision.file.set_dequantize(dequantize);
    }

    /// The text file's name for `name`.
    fn text_name(&self, name: &str) -> String {
        match self.text_prefix.and_then(|p| name.strip_prefix(p)) {
            Some(rest) => format!("model.{rest}"),
            None => name.to_string(),
        }
    }

    fn is_vision(&self, name: &str) -> bool {
        self.vision.has(name)
    }

    /// `GgufWeights::block_type` of a text tensor (conversion copies its
    /// blocks as they are); vision tensors go through their values, since
    /// the mmproj's patch kernel is rebuilt from two tensors.
    pub fn block_type(&self, name: &str) -> Option<mllm_backends::quant::QuantType> {
        (!self.is_vision(name))
            .then(|| self.text.block_type(&self.text_name(name)))
            .flatten()
    }

    /// `GgufWeights::blocks` of a text tensor.
    pub fn blocks(&self, name: &str) -> Option<Vec<u8>> {
        (!self.is_vision(name))
            .then(|| self.text.blocks(&self.text_name(name)))
            .flatten()
    }
}

impl WeightSource for VisionLanguageWeights {
    fn describe(&self) -> String {
        format!("{} with {}", self.text.describe(), self.vision.describe())
    }

    fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .text
            .names()
            .into_iter()
            .map(|n| match (self.text_prefix, n.strip_prefix("model.")) {
                (Some(p), Some(rest)) => format!("{p}{rest}"),
                _ => n,
            })
            .chain(self.vision.names())
            .collect();
        out.sort();
        out
    }

    fn info(&self, name: &str) -> Option<TensorInfo> {
        if self.is_vision(name) {
            return self.vision.info(name);
        }
        self.text.info(&self.text_name(name))
    }

    fn load(&self, name: &str) -> std::result::Result<Tensor, String> {
        if self.is_vision(name) {
            return self.vision.load(name);
        }
        self.text.load(&self.text_name(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmproj_names_map_to_the_tower() {
        let ds = [0, 3];
        for (g, h) in [
            ("v.patch_embd.weight", Some("patch_embed.proj.weight")),
            ("v.patch_embd.bias", Some("patch_embed.proj.bias")),
            ("v.position_embd.weight", Some("pos_embed.weight")),
            ("v.blk.2.ln1.bias", Some("blocks.2.norm1.bias")),
            (
                "v.blk.10.attn_qkv.weight",
                Some("blocks.10.attn.qkv.weight"),
            ),
            ("v.blk.0.attn_out.weight", Some("blocks.0.attn.proj.weight")),
            (
                "v.blk.1.ffn_down.bias",
                Some("blocks.1.mlp.linear_fc2.bias"),
            ),
            ("v.post_ln.weight", Some("merger.norm.weight")),
            ("mm.2.bias", Some("merger.linear_fc2.bias")),
            // The absolute block index 3 is the second merger of the list.
            (
                "v.deepstack.3.fc1.weight",
                Some("deepstack_merger_list.1.linear_fc1.weight"),
            ),
            (
                "v.deepstack.0.norm.bias",
                Some("deepstack_merger_list.0.norm.bias"),
            ),
            // A block no merger reads, unknown roles and suffixes.
            ("v.deepstack.1.fc1.weight", None),
            ("v.blk.0.attn_q.weight", None),
            ("mm.1.weight", None),
            ("v.patch_embd.weight.1", None),
        ] {
            assert_eq!(hf_name(g, &ds).as_deref(), h, "{g}");
        }
    }
}
