//! The one table between GGUF tensor names (llama.cpp's `token_embd`,
//! `blk.N.attn_q`, ...) and Hugging Face names (`model.embed_tokens`,
//! `model.layers.N.self_attn.q_proj`, ...). It is the same for almost every
//! architecture: llama.cpp gives a tensor role one GGUF name whatever the
//! model, and the Llama-style HF families (Llama, Mistral, Qwen2, Qwen3,
//! Qwen3-MoE, SmolLM3) name those roles alike. A family that names some
//! otherwise says so in its file under family/ (`block_names`,
//! `whole_names`: Gemma 3's four norms per layer, Qwen3.5's Gated DeltaNet,
//! DeepSeek's plural shared experts; BERT's encoder names). Names outside
//! the tables keep their GGUF name.

use super::family::{bert, family, Layout};

/// Tensors outside the decoder blocks: (GGUF stem, HF stem).
const GLOBAL: &[(&str, &str)] = &[
    ("token_embd", "model.embed_tokens"),
    ("output_norm", "model.norm"),
    ("output", "lm_head"),
];

/// Tensors of block N: `blk.N.{gguf}` is `model.layers.N.{hf}`.
const BLOCK: &[(&str, &str)] = &[
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    // Mixture of experts: the router, and one 3-D tensor [experts, rows,
    // cols] per projection (the binder stacks per-expert HF tensors into
    // this layout too; see interpreter/src/bind_experts.rs).
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_exps", "mlp.experts.gate_proj"),
    ("ffn_up_exps", "mlp.experts.up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
    // The shared expert of Qwen2-MoE / Qwen3.5-MoE, and its sigmoid gate
    // ([1, hidden]).
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
];

/// llama.cpp's fused expert projection (`--fuse-gate-up-exps`), `[E, 2I, H]`
/// with each expert's gate rows first: transformers 5's
/// `mlp.experts.gate_up_proj`, a parameter without `.weight`.
const FUSED_GATE_UP: (&str, &str) = ("ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj");

/// Splits `prefix.N.rest.{weight,bias}` into (N, rest, suffix).
fn split_block<'a>(name: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let rest = name.strip_prefix(prefix)?;
    let (n, part) = rest.split_once('.')?;
    let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    digits.then_some((n, part))
}

fn split_suffix(name: &str) -> Option<(&str, &str)> {
    let (stem, suffix) = name.rsplit_once('.')?;
    matches!(suffix, "weight" | "bias").then_some((stem, suffix))
}

fn lookup<'a>(table: &[(&'a str, &'a str)], key: &str, forward: bool) -> Option<&'a str> {
    table.iter().find_map(|&(g, h)| match forward {
        true => (g == key).then_some(h),
        false => (h == key).then_some(g),
    })
}

fn map(arch: &str, name: &str, forward: bool) -> Option<String> {
    let fam = family(arch);
    if fam.is_some_and(|f| f.layout == Layout::Encoder) {
        return map_bert(name, forward);
    }
    let (from, to) = match forward {
        true => ("blk.", "model.layers."),
        false => ("model.layers.", "blk."),
    };
    let (special, whole) = fam.map_or((&[][..], &[][..]), |f| (f.block_names, f.whole_names));
    if let Some((n, part)) = split_block(name, from) {
        let fused: &[(&str, &str)] = &[FUSED_GATE_UP];
        if let Some(b) = lookup(whole, part, forward).or_else(|| lookup(fused, part, forward)) {
            return Some(format!("{to}{n}.{b}"));
        }
    }
    let (stem, suffix) = split_suffix(name)?;
    if let Some((n, part)) = split_block(stem, from) {
        let mapped = lookup(special, part, forward).or_else(|| lookup(BLOCK, part, forward))?;
        return Some(format!("{to}{n}.{mapped}.{suffix}"));
    }
    Some(format!("{}.{suffix}", lookup(GLOBAL, stem, forward)?))
}

fn map_bert(name: &str, forward: bool) -> Option<String> {
    let (from, to) = match forward {
        true => ("blk.", "encoder.layer."),
        false => ("encoder.layer.", "blk."),
    };
    let (stem, suffix) = split_suffix(name)?;
    if let Some((n, part)) = split_block(stem, from) {
        return Some(format!(
            "{to}{n}.{}.{suffix}",
            lookup(bert::BLOCK, part, forward)?
        ));
    }
    Some(format!("{}.{suffix}", lookup(bert::GLOBAL, stem, forward)?))
}

/// The Hugging Face name of a GGUF tensor, if the table knows it.
pub fn hf_name(gguf: &str) -> Option<String> {
    map("", gguf, true)
}

/// The GGUF name of a Hugging Face tensor, if the table knows it.
pub fn gguf_name(hf: &str) -> Option<String> {
    map("", hf, false)
}

/// `hf_name` for a file of llama.cpp architecture `arch` (`gemma3`, ...).
pub fn hf_name_for(arch: &str, gguf: &str) -> Option<String> {
    map(arch, gguf, true)
}

/// `gguf_name` for a file of llama.cpp architecture `arch`.
pub fn gguf_name_for(arch: &str, hf: &str) -> Option<String> {
    map(arch, hf, false)
}

/// llama.cpp's names of the multi-token-prediction head's own tensors
/// (conversion/qwen.py, `_QwenMtpMixin`): `blk.{first}.nextn.{gguf}` is
/// Hugging Face's `mtp.{hf}`.
const NEXTN: &[(&str, &str)] = &[
    ("eh_proj", "fc"),
    ("enorm", "pre_fc_norm_embedding"),
    ("hnorm", "pre_fc_norm_hidden"),
    ("shared_head_norm", "norm"),
];

/// The Hugging Face name of tensor `gguf` (`mapped`: its name by the
/// tables) in a file whose blocks from `first` on are multi-token-prediction
/// layers: block `first + j` is `mtp.layers.j`, and the head's own tensors
/// (`nextn.*`) are `mtp.*`. None for tensors of the decoder's blocks and
/// outside blocks.
pub fn mtp_name(gguf: &str, mapped: &str, first: usize) -> Option<String> {
    let (n, part) = split_block(gguf, "blk.")?;
    let j = n.parse::<usize>().ok()?.checked_sub(first)?;
    if let Some(rest) = part.strip_prefix("nextn.") {
        let (stem, suffix) = split_suffix(rest)?;
        let hf = lookup(NEXTN, stem, true).filter(|_| j == 0)?;
        return Some(format!("mtp.{hf}.{suffix}"));
    }
    let (_, tail) = split_block(mapped, "model.layers.")?;
    Some(format!("mtp.layers.{j}.{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextn_blocks_are_the_mtp_head() {
        let cases = [
            ("blk.3.nextn.eh_proj.weight", "mtp.fc.weight"),
            (
                "blk.3.nextn.enorm.weight",
                "mtp.pre_fc_norm_embedding.weight",
            ),
            ("blk.3.nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight"),
            ("blk.3.nextn.shared_head_norm.weight", "mtp.norm.weight"),
            (
                "blk.3.attn_q.weight",
                "mtp.layers.0.self_attn.q_proj.weight",
            ),
            ("blk.4.ffn_down.weight", "mtp.layers.1.mlp.down_proj.weight"),
            (
                "blk.3.post_attention_norm.weight",
                "mtp.layers.0.post_attention_layernorm.weight",
            ),
        ];
        for (g, want) in cases {
            let mapped = hf_name_for("qwen35", g).unwrap_or_else(|| g.to_string());
            assert_eq!(mtp_name(g, &mapped, 3).as_deref(), Some(want), "{g}");
        }
        // The decoder's blocks and global tensors keep their names; a
        // second layer's own nextn tensors have no HF name.
        assert_eq!(
            mtp_name(
                "blk.2.attn_q.weight",
                "model.layers.2.self_attn.q_proj.weight",
                3
            ),
            None
        );
        assert_eq!(
            mtp_name("token_embd.weight", "model.embed_tokens.weight", 3),
            None
        );
        assert_eq!(
            mtp_name(
                "blk.4.nextn.eh_proj.weight",
                "blk.4.nextn.eh_proj.weight",
                3
            ),
            None
        );
    }

    #[test]
    fn bert_names_map_both_ways() {
        for (g, h) in [
            ("token_embd.weight", "embeddings.word_embeddings.weight"),
            ("token_embd_norm.bias", "embeddings.LayerNorm.bias"),
            (
                "blk.3.attn_output_norm.weight",
                "encoder.layer.3.attention.output.LayerNorm.weight",
            ),
            ("blk.0.ffn_down.bias", "encoder.layer.0.output.dense.bias"),
            (
                "blk.11.attn_q.weight",
                "encoder.layer.11.attention.self.query.weight",
            ),
        ] {
            assert_eq!(hf_name_for("bert", g).as_deref(), Some(h));
            assert_eq!(gguf_name_for("bert", h).as_deref(), Some(g));
        }
        assert_eq!(hf_name_for("bert", "blk.0.attn_norm.weight"), None);
    }

    #[test]
    fn names_map_both_ways() {
        let pairs = [
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output.weight", "lm_head.weight"),
            ("output_norm.weight", "model.norm.weight"),
            (
                "blk.0.attn_q.weight",
                "model.layers.0.self_attn.q_proj.weight",
            ),
            (
                "blk.12.attn_q.bias",
                "model.layers.12.self_attn.q_proj.bias",
            ),
            (
                "blk.3.attn_k_norm.weight",
                "model.layers.3.self_attn.k_norm.weight",
            ),
            (
                "blk.1.ffn_norm.weight",
                "model.layers.1.post_attention_layernorm.weight",
            ),
        ];
        for (g, h) in pairs {
            assert_eq!(hf_name(g).as_deref(), Some(h));
            assert_eq!(gguf_name(h).as_deref(), Some(g));
        }
        for (g, h) in [
            (
                "blk.4.ffn_gate_inp.weight",
                "model.layers.4.mlp.gate.weight",
            ),
            (
                "blk.4.ffn_up_exps.weight",
                "model.layers.4.mlp.experts.up_proj.weight",
            ),
            (
                "blk.4.ffn_gate_up_exps.weight",
                "model.layers.4.mlp.experts.gate_up_proj",
            ),
        ] {
            assert_eq!(hf_name(g).as_deref(), Some(h));
            assert_eq!(gguf_name(h).as_deref(), Some(g));
        }
        for bad in [
            "rope_freqs.weight",
            "blk.x.attn_q.weight",
            "blk.0.attn_q",
            "blk..attn_q.weight",
            "blk.0.attn_q.scale",
        ] {
            assert_eq!(hf_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn gemma_norms_have_their_own_names() {
        let pairs = [
            ("ffn_norm", "pre_feedforward_layernorm"),
            ("post_attention_norm", "post_attention_layernorm"),
            ("post_ffw_norm", "post_feedforward_layernorm"),
            ("attn_norm", "input_layernorm"),
            ("attn_q_norm", "self_attn.q_norm"),
        ];
        for (g, h) in pairs {
            let (g, h) = (
                format!("blk.2.{g}.weight"),
                format!("model.layers.2.{h}.weight"),
            );
            assert_eq!(hf_name_for("gemma3", &g).as_deref(), Some(&*h));
            assert_eq!(gguf_name_for("gemma3", &h).as_deref(), Some(&*g));
        }
        // Elsewhere ffn_norm keeps the Llama meaning.
        assert_eq!(
            hf_name_for("qwen3", "blk.2.ffn_norm.weight").as_deref(),
            Some("model.layers.2.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name_for("llama", "blk.2.post_ffw_norm.weight"), None);
    }

    #[test]
    fn qwen35_deltanet_names() {
        let pairs = [
            ("blk.0.attn_qkv.weight", "linear_attn.in_proj_qkv.weight"),
            ("blk.0.attn_gate.weight", "linear_attn.in_proj_z.weight"),
            ("blk.0.ssm_alpha.weight", "linear_attn.in_proj_a.weight"),
            ("blk.0.ssm_beta.weight", "linear_attn.in_proj_b.weight"),
            ("blk.0.ssm_conv1d.weight", "linear_attn.conv1d.weight"),
            ("blk.0.ssm_norm.weight", "linear_attn.norm.weight"),
            ("blk.0.ssm_out.weight", "linear_attn.out_proj.weight"),
            ("blk.0.ssm_a", "linear_attn.A_log"),
            ("blk.0.ssm_dt.bias", "linear_attn.dt_bias"),
            (
                "blk.0.post_attention_norm.weight",
                "post_attention_layernorm.weight",
            ),
            (
                "blk.0.ffn_up_shexp.weight",
                "mlp.shared_expert.up_proj.weight",
            ),
            (
                "blk.0.ffn_gate_inp_shexp.weight",
                "mlp.shared_expert_gate.weight",
            ),
            ("blk.0.attn_q.weight", "self_attn.q_proj.weight"),
        ];
        for arch in ["qwen35", "qwen35moe"] {
            for (g, h) in pairs {
                let h = format!("model.layers.0.{h}");
                assert_eq!(hf_name_for(arch, g).as_deref(), Some(&*h), "{arch}");
                assert_eq!(gguf_name_for(arch, &h).as_deref(), Some(g), "{arch}");
            }
        }
        // Elsewhere attn_qkv is not the DeltaNet's, and ssm_a has no name.
        assert_eq!(hf_name_for("qwen3", "blk.0.attn_qkv.weight"), None);
        assert_eq!(hf_name_for("qwen3", "blk.0.ssm_a"), None);
    }

    #[test]
    fn deepseek_shared_experts_are_plural() {
        assert_eq!(
            hf_name_for("deepseek2-ocr", "blk.1.ffn_down_shexp.weight").as_deref(),
            Some("model.layers.1.mlp.shared_experts.down_proj.weight")
        );
        assert_eq!(
            gguf_name_for(
                "deepseek2-ocr",
                "model.layers.1.mlp.shared_experts.up_proj.weight"
            )
            .as_deref(),
            Some("blk.1.ffn_up_shexp.weight")
        );
        // Qwen's keep the singular.
        assert_eq!(
            hf_name_for("qwen35moe", "blk.1.ffn_down_shexp.weight").as_deref(),
            Some("model.layers.1.mlp.shared_expert.down_proj.weight")
        );
    }
}
