//! The families a GGUF file may hold, one registry keyed by llama.cpp's
//! `general.architecture`: per family, the transformers class and
//! `model_type` its config names (and those of the whole model when an
//! mmproj joins), the config.json keys it adds to the common Llama-style
//! ones, the tensor names it gives its own meaning, and the value fixes its
//! weights need (q/k rows llama.cpp permuted, norms stored as 1 + w, Gated
//! DeltaNet tensors). One file per family; adding a family is its script,
//! its file here and its line in `FAMILIES`.
//!
//! Each mapping follows what llama.cpp does when it runs the file (its
//! `src/models/*.cpp`), including the values it fixes in code instead of
//! reading them from the file.

pub(crate) mod bert;
mod deepseek;
mod gemma3;
mod keys;
mod llama;
mod qwen35;
mod qwen3moe;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

pub(crate) use keys::{Keys, Meta};

use crate::error::Result;

/// (GGUF, HF) name pairs.
pub(crate) type Table = &'static [(&'static str, &'static str)];

/// How a family names its tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Layout {
    /// `token_embd`/`blk.N.*`/`output` against `model.embed_tokens`,
    /// `model.layers.N.*`, `lm_head` (names.rs), with `block_names` and
    /// `whole_names` taking precedence.
    Decoder,
    /// BERT's encoder names (bert.rs).
    Encoder,
}

/// One architecture llama.cpp writes.
pub(crate) struct Family {
    /// `general.architecture`.
    pub arch: &'static str,
    /// The transformers class (`architectures[0]`) and `model_type` of the
    /// model the file holds alone.
    pub class: &'static str,
    pub model_type: &'static str,
    /// The class and `model_type` of the vision-language model it makes
    /// with an mmproj file (mmproj.rs), where it has one.
    pub vision: Option<(&'static str, &'static str)>,
    /// Adds the family's config.json keys to the common ones.
    pub config: fn(&mut Keys) -> Result<()>,
    pub layout: Layout,
    /// Block tensors (`blk.N.{gguf}.weight`) named otherwise than in
    /// names.rs's table.
    pub block_names: Table,
    /// Block parameters without a `.weight`/`.bias` suffix in one of the
    /// two files (whole names after `blk.N.`).
    pub whole_names: Table,
    /// llama.cpp's converter permuted the q/k rows for its rope (Llama's
    /// `permute`): the weights undo it.
    pub permuted_qk: bool,
    /// Norm weights stored as 1 + w (Gemma, Qwen3.5): the weights undo it.
    pub norm_plus_one: bool,
    /// Gated DeltaNet layers whose tensors need more than a name (Qwen3.5).
    pub delta_net: bool,
    /// Rotary embedding on part of each head only, so a multimodal rope's
    /// sections may name more pairs than the head rotates (Qwen3.5).
    pub partial_rotary: bool,
    /// Every MLP is sparse: the file may lack `feed_forward_length`.
    pub sparse_only: bool,
}

/// A Llama-style decoder with nothing of its own; families start from it.
pub(crate) const DECODER: Family = Family {
    arch: "",
    class: "",
    model_type: "",
    vision: None,
    config: |_| Ok(()),
    layout: Layout::Decoder,
    block_names: &[],
    whole_names: &[],
    permuted_qk: false,
    norm_plus_one: false,
    delta_net: false,
    partial_rotary: false,
    sparse_only: false,
};

const QWEN2: Family = Family {
    arch: "qwen2",
    class: "Qwen2ForCausalLM",
    model_type: "qwen2",
    ..DECODER
};

const QWEN3: Family = Family {
    arch: "qwen3",
    class: "Qwen3ForCausalLM",
    model_type: "qwen3",
    ..DECODER
};

/// Qwen3-VL's text decoder is Qwen3's (see qwen3moe.rs for why the
/// multimodal rope adds nothing for text).
const QWEN3VL: Family = Family {
    arch: "qwen3vl",
    vision: Some(("Qwen3VLForConditionalGeneration", "qwen3_vl")),
    ..QWEN3
};

/// Every family, by `general.architecture`. Qwen2 and Qwen3 (with Qwen3-VL's
/// text decoder) are the Llama-style decoder as it is, so they live here.
const FAMILIES: &[&Family] = &[
    &llama::LLAMA,
    &llama::SMOLLM3,
    &QWEN2,
    &QWEN3,
    &QWEN3VL,
    &qwen3moe::QWEN3MOE,
    &qwen3moe::QWEN3VLMOE,
    &gemma3::GEMMA3,
    &qwen35::QWEN35,
    &qwen35::QWEN35MOE,
    &deepseek::DEEPSEEK2_OCR,
    &bert::BERT,
];

/// The family of llama.cpp architecture `arch`.
pub(crate) fn family(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| f.arch == arch)
}

/// Every architecture the registry knows, for messages.
pub(crate) fn known() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().map(|f| f.arch)
}

/// What a GGUF architecture loads as: (`general.architecture`, the
/// transformers class of the text model, that of the vision-language model
/// with an mmproj where there is one). Every class must be a module of a
/// built-in script (runtime/src/assets.rs tests it).
pub fn gguf_families() -> Vec<(&'static str, &'static str, Option<&'static str>)> {
    FAMILIES
        .iter()
        .map(|f| (f.arch, f.class, f.vision.map(|v| v.0)))
        .collect()
}

/// The architectures an mmproj file can join.
pub(crate) fn with_vision() -> impl Iterator<Item = &'static Family> {
    FAMILIES.iter().copied().filter(|f| f.vision.is_some())
}

/// Adds the keys of `arch`'s family to `c`, which holds the common ones.
pub(crate) fn add_config(arch: &str, m: &dyn Meta, c: &mut Map<String, Value>) -> Result<()> {
    let Some(f) = family(arch) else {
        return Ok(());
    };
    (f.config)(&mut Keys { m, c, arch })
}
