//! `mllm random-checkpoint --preset NAME --out DIR`: a Hugging Face directory
//! (config.json + model.safetensors) with a real architecture's sizes and
//! seeded random weights, so speed can be measured without downloading a
//! model. Tensors are generated and written one at a time (the file is
//! never held in memory). `--layout published` writes the tensor shapes of
//! the published checkpoint where they differ from the script's, so other
//! engines' converters (llama.cpp's) read the directory as they would the
//! real one.

use std::io::{BufWriter, Write};
use std::path::Path;

use serde_json::json;

use crate::{CliError, CliResult};

/// (name, config.json) of the architectures we measure against.
pub fn preset(name: &str) -> Option<serde_json::Value> {
    let qwen3 = |hidden: u64, inter: u64, layers: u64, heads: u64, kv: u64, tie: bool| {
        json!({
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
            "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": tie,
            "max_position_embeddings": 40960, "hidden_act": "silu", "attention_bias": false,
            "bos_token_id": 151643, "eos_token_id": 151645,
        })
    };
    Some(match name {
        "qwen3-0.6b" => qwen3(1024, 3072, 28, 16, 8, true),
        "qwen3-1.7b" => qwen3(2048, 6144, 28, 16, 8, true),
        "smollm2-135m" => json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 49152,
            "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
            "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-5,
            "rope_theta": 100000.0, "tie_word_embeddings": true, "max_position_embeddings": 8192,
            "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        }),
        "llama-3.2-1b" => json!({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "tie_word_embeddings": true, "max_position_embeddings": 131072,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            "hidden_act": "silu", "bos_token_id": 128000, "eos_token_id": 128001,
        }),
        // Qwen3-VL-2B-Instruct's published sizes (text like Qwen3-1.7B).
        "qwen3-vl-2b" => json!({
            "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
            "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653,
            "tie_word_embeddings": true,
            "text_config": {
                "model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 2048,
                "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
                "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
                "rope_theta": 5000000.0, "max_position_embeddings": 262144,
                "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": true},
                "hidden_act": "silu", "attention_bias": false, "tie_word_embeddings": true,
                "bos_token_id": 151643, "eos_token_id": 151645,
            },
            "vision_config": {
                "model_type": "qwen3_vl", "depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
                "num_heads": 16, "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
                "deepstack_visual_indexes": [5, 11, 17], "hidden_act": "gelu_pytorch_tanh",
            },
        }),
        // Qwen/Qwen3-30B-A3B: 128 experts, 8 per token, every layer sparse.
        "qwen3-30b-a3b" => json!({
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
            "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
            "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": null,
            "tie_word_embeddings": false, "max_position_embeddings": 40960, "hidden_act": "silu",
            "attention_bias": false, "use_sliding_window": false,
            "bos_token_id": 151643, "eos_token_id": 151645,
        }),
        // HuggingFaceTB/SmolLM3-3B: every 4th layer without rope (NoPE).
        "smollm3-3b" => json!({
            "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 128256,
            "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
            "num_attention_heads": 16, "num_key_value_heads": 4, "rms_norm_eps": 1e-6,
            "rope_theta": 5000000.0, "rope_scaling": null, "no_rope_layer_interval": 4,
            "tie_word_embeddings": true, "max_position_embeddings": 65536, "hidden_act": "silu",
            "attention_bias": false, "mlp_bias": false, "use_sliding_window": false,
            "eos_token_id": 128012, "pad_token_id": 128004,
        }),
        // google/gemma-3-1b-it (text): 5 sliding layers of 512 per global one.
        "gemma3-1b" => json!({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
            "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
            "query_pre_attn_scalar": 256, "sliding_window": 512, "sliding_window_pattern": 6,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
            "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh",
            "final_logit_softcapping": null, "attn_logit_softcapping": null,
            "max_position_embeddings": 32768, "attention_bias": false,
            "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
        }),
        // Qwen/Qwen3.5-0.8B (text; published as *ForConditionalGeneration
        // with a vision tower, which text speed runs do not need): 3 DeltaNet
        // layers per full-attention one, 16 key = 16 value heads, tied.
        "qwen3.5-0.8b" => json!({
            "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
            "vocab_size": 248320, "hidden_size": 1024, "intermediate_size": 3584,
            "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_num_key_heads": 16, "linear_num_value_heads": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "rms_norm_eps": 1e-6, "tie_word_embeddings": true, "max_position_embeddings": 262144,
            "hidden_act": "silu", "attention_bias": false, "eos_token_id": 248044,
        }),
        // Qwen/Qwen3.5-35B-A3B (text): 256 experts, 8 per token, a shared
        // expert, 2 value heads per DeltaNet key head.
        "qwen3.5-35b-a3b" => json!({
            "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
            "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
            "num_experts": 256, "num_experts_per_tok": 8, "full_attention_interval": 4,
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "max_position_embeddings": 262144,
            "hidden_act": "silu", "attention_bias": false, "eos_token_id": 248044,
        }),
        // Qwen/Qwen3-VL-30B-A3B-Instruct: Qwen3-30B-A3B's text decoder with
        // interleaved mrope, the 27-block ViT with DeepStack after 8, 16, 24.
        "qwen3-vl-30b-a3b" => json!({
            "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
            "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653,
            "tie_word_embeddings": false,
            "text_config": {
                "model_type": "qwen3_vl_moe_text", "vocab_size": 151936, "hidden_size": 2048,
                "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
                "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
                "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
                "mlp_only_layers": [], "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
                "max_position_embeddings": 262144,
                "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": true},
                "hidden_act": "silu", "attention_bias": false, "tie_word_embeddings": false,
                "bos_token_id": 151643, "eos_token_id": 151645,
            },
            "vision_config": {
                "model_type": "qwen3_vl_moe", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                "num_heads": 16, "out_hidden_size": 2048, "patch_size": 16, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
                "deepstack_visual_indexes": [8, 16, 24], "hidden_act": "gelu_pytorch_tanh",
            },
        }),
        // deepseek-community/DeepSeek-OCR-2 in transformers' layout: the
        // SAM ViT-B (class defaults), the Qwen2-0.5B-sized second encoder
        // the original code builds from fixed sizes (896 wide, 24 layers,
        // 14 heads, 2 KV heads, MLP 4864, rope base 1e6), and
        // DeepSeek-OCR's 3B MoE decoder (12 layers of 1280, the first
        // dense, 64 experts of 896 with 6 per token and 2 shared).
        "deepseek-ocr2" => json!({
            "architectures": ["DeepseekOcr2ForConditionalGeneration"], "model_type": "deepseek_ocr2",
            "image_token_id": 128815, "tie_word_embeddings": false,
            "text_config": {
                "model_type": "deepseek_ocr2_text", "vocab_size": 129280, "hidden_size": 1280,
                "intermediate_size": 6848, "moe_intermediate_size": 896, "num_hidden_layers": 12,
                "num_attention_heads": 10, "num_key_value_heads": 10, "n_routed_experts": 64,
                "num_experts_per_tok": 6, "n_shared_experts": 2, "routed_scaling_factor": 1.0,
                "topk_method": "greedy", "first_k_dense_replace": 1,
                "mlp_layer_types": ["dense", "sparse", "sparse", "sparse", "sparse", "sparse",
                                    "sparse", "sparse", "sparse", "sparse", "sparse", "sparse"],
                "rms_norm_eps": 1e-6, "max_position_embeddings": 8192, "attention_bias": false,
                "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
            },
            "vision_config": {
                "model_type": "deepseek_ocr2_vision",
                "sam_config": {"model_type": "deepseek_ocr2_sam_vision_model"},
                "encoder_config": {
                    "model_type": "deepseek_ocr2_encoder", "hidden_size": 896,
                    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                    "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
                },
            },
        }),
        _ => return None,
    })
}

pub const PRESETS: &[&str] = &[
    "qwen3-0.6b",
    "qwen3-1.7b",
    "smollm2-135m",
    "llama-3.2-1b",
    "qwen3-vl-2b",
    "qwen3-30b-a3b",
    "smollm3-3b",
    "gemma3-1b",
    "qwen3.5-0.8b",
    "qwen3.5-35b-a3b",
    "qwen3-vl-30b-a3b",
    "deepseek-ocr2",
];

/// Which tensor shapes `run` writes: the script's parameter table, or the
/// published checkpoint's where those differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Script,
    Published,
}

impl Layout {
    pub fn parse(s: &str) -> CliResult<Layout> {
        match s {
            "script" => Ok(Layout::Script),
            "published" => Ok(Layout::Published),
            other => Err(CliError::invalid(format!(
                "--layout {other}: use script or published"
            ))),
        }
    }
}

/// The published checkpoint's shape of `name` when it differs from the
/// script's `shape`; `None` where they agree. Published Qwen3-VL-MoE
/// checkpoints store the fused expert stacks transposed: gate_up_proj
/// [E, H, 2I] and down_proj [E, I, H] where the script declares [E, 2I, H]
/// and [E, H, I]; our loader and `convert` take either (the values are
/// independent noise, so only the shape differs).
fn published_shape(model_type: &str, name: &str, shape: &[usize]) -> Option<Vec<usize>> {
    let fused = name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj");
    match (model_type, shape) {
        ("qwen3_vl_moe", &[e, a, b]) if fused => Some(vec![e, b, a]),
        _ => None,
    }
}

/// Model types whose published layout `published_shape` knows (where it
/// differs from the script's).
const PUBLISHED_LAYOUTS: &[&str] = &["qwen3_vl_moe"];

/// The mean of a 1-D tensor's random values: RMSNorms that scale by
/// (1 + w) (Gemma's; Qwen3.5's but for the DeltaNet's gated norm) sit near
/// 0, everything else (norms scaling by w, Qwen3.5's A_log and dt_bias)
/// near 1.
fn one_d_mean(model_type: &str, name: &str) -> f32 {
    let plus_one = model_type.starts_with("gemma")
        || model_type.starts_with("qwen3_5")
            && name.ends_with("norm.weight")
            && !name.contains("linear_attn.");
    if plus_one {
        0.0
    } else {
        1.0
    }
}

/// splitmix64 -> roughly normal values (sum of uniforms), scaled by `std`.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        let mut s = 0.0f32;
        for _ in 0..4 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            s += (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * 1.732
    }
}

/// Writes the checkpoint; `layers` overrides the preset's layer count (small
/// test models with real widths).
pub fn run(
    preset_name: &str,
    out: &str,
    dtype: &str,
    seed: u64,
    layers: Option<u64>,
    layout: &str,
) -> CliResult<()> {
    let layout = Layout::parse(layout)?;
    let Some(mut config) = preset(preset_name) else {
        return Err(CliError::invalid(format!(
            "unknown preset `{preset_name}`; presets: {}",
            PRESETS.join(", ")
        )));
    };
    let top_type = config["model_type"].as_str().unwrap_or("").to_string();
    if layout == Layout::Published && !PUBLISHED_LAYOUTS.contains(&top_type.as_str()) {
        // Saying so beats writing the script's layout under another name.
        return Err(CliError::invalid(format!(
            "--layout published: known only for qwen3-vl-30b-a3b (transposed expert \
             stacks); preset `{preset_name}` is written in its script's layout"
        )));
    }
    if let Some(n) = layers {
        match config.get_mut("text_config") {
            Some(text) => text["num_hidden_layers"] = json!(n),
            None => config["num_hidden_layers"] = json!(n),
        }
    }
    let (st_dtype, bytes_per) = match dtype {
        "bf16" => ("BF16", 2),
        "f16" => ("F16", 2),
        "f32" => ("F32", 4),
        other => {
            return Err(CliError::invalid(format!(
                "--dtype {other}: use bf16, f16 or f32"
            )))
        }
    };
    let dir = Path::new(out);
    std::fs::create_dir_all(dir)?;
    let mut cfg = config.clone();
    cfg["torch_dtype"] = json!(match dtype {
        "bf16" => "bfloat16",
        "f16" => "float16",
        _ => "float32",
    });
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&cfg)?)?;
    // The tensors the architecture's script declares for this config.
    let mut list = mllm_runtime::model_files::parameter_table(&config)?;
    if layout == Layout::Published {
        for (name, shape) in &mut list {
            if let Some(s) = published_shape(&top_type, name, shape) {
                *shape = s;
            }
        }
    }
    // The safetensors header first (offsets are known from the shapes), then the data.
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape) in &list {
        let n: usize = shape.iter().product::<usize>() * bytes_per;
        header.insert(
            name.clone(),
            json!({ "dtype": st_dtype, "shape": shape, "data_offsets": [offset, offset + n] }),
        );
        offset += n;
    }
    let mut h = serde_json::to_string(&header)?;
    while (8 + h.len()) % 8 != 0 {
        h.push(' ');
    }
    let path = dir.join("model.safetensors");
    let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(&path)?);
    w.write_all(&(h.len() as u64).to_le_bytes())?;
    w.write_all(h.as_bytes())?;
    let model_type = config["text_config"]["model_type"]
        .as_str()
        .or(config["model_type"].as_str())
        .unwrap_or("")
        .to_string();
    let mut noise = Noise(seed);
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let total = list.len();
    for (i, (name, shape)) in list.iter().enumerate() {
        let n: usize = shape.iter().product();
        // Norm weights near the identity, matrices with a spread that keeps
        // activations bounded.
        let (mean, std) = if shape.len() == 1 {
            (one_d_mean(&model_type, name), 0.05)
        } else {
            (0.0, 0.02)
        };
        let mut buf = Vec::with_capacity(n * bytes_per);
        for _ in 0..n {
            let v = mean + std * noise.next();
            match dtype {
                "bf16" => buf.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
                "f16" => buf.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
                _ => buf.extend_from_slice(&v.to_le_bytes()),
            }
        }
        w.write_all(&buf)?;
        if tty {
            eprint!("\rwrote {}/{total} tensors ({name})\x1b[K", i + 1);
        }
    }
    w.flush()?;
    eprintln!(
        "\r{} written: {total} tensors, {:.1} MB, preset {preset_name}, {dtype}\x1b[K",
        dir.display(),
        offset as f64 / 1e6
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every preset is a config its script accepts; spot checks of the
    /// published sizes the tensor table must reflect.
    #[test]
    fn presets_configure_their_scripts() {
        for name in PRESETS {
            let config = preset(name).unwrap_or_else(|| panic!("{name}: no preset"));
            let table = mllm_runtime::model_files::parameter_table(&config)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let shape = |t: &str| {
                table
                    .iter()
                    .find(|(n, _)| n == t)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_else(|| panic!("{name}: no {t}"))
            };
            match *name {
                "qwen3-30b-a3b" => {
                    assert_eq!(
                        shape("model.layers.47.mlp.experts.gate_up_proj"),
                        [128, 1536, 2048]
                    );
                    assert_eq!(shape("model.layers.0.mlp.gate.weight"), [128, 2048]);
                    assert_eq!(
                        shape("model.layers.0.self_attn.q_proj.weight"),
                        [4096, 2048]
                    );
                    assert_eq!(shape("lm_head.weight"), [151936, 2048]);
                }
                "smollm3-3b" => {
                    assert_eq!(shape("model.layers.35.mlp.up_proj.weight"), [11008, 2048]);
                    assert_eq!(shape("model.layers.0.self_attn.k_proj.weight"), [512, 2048]);
                    assert!(!table.iter().any(|(n, _)| n == "lm_head.weight"));
                }
                "gemma3-1b" => {
                    assert_eq!(shape("model.embed_tokens.weight"), [262144, 1152]);
                    assert_eq!(
                        shape("model.layers.25.self_attn.q_proj.weight"),
                        [1024, 1152]
                    );
                    assert_eq!(
                        shape("model.layers.0.pre_feedforward_layernorm.weight"),
                        [1152]
                    );
                }
                "qwen3.5-0.8b" => {
                    // q and gate of 8 heads of 256; q/k/v of 16 + 16 + 16 heads of 128.
                    let attn = "model.layers.3.self_attn.q_proj.weight";
                    assert_eq!(shape(attn), [4096, 1024]);
                    let qkv = "model.layers.0.linear_attn.in_proj_qkv.weight";
                    assert_eq!(shape(qkv), [6144, 1024]);
                    assert_eq!(shape("model.layers.23.mlp.down_proj.weight"), [1024, 3584]);
                    assert!(!table.iter().any(|(n, _)| n.contains("layers.0.self_attn")));
                }
                "qwen3.5-35b-a3b" => {
                    let qkv = "model.layers.0.linear_attn.in_proj_qkv.weight";
                    assert_eq!(shape(qkv), [8192, 2048]);
                    assert_eq!(shape("model.layers.0.linear_attn.A_log"), [32]);
                    let e = shape("model.layers.39.mlp.experts.gate_up_proj");
                    assert_eq!(e, [256, 1024, 2048]);
                    let shared = "model.layers.0.mlp.shared_expert_gate.weight";
                    assert_eq!(shape(shared), [1, 2048]);
                }
                "qwen3-vl-30b-a3b" => {
                    let e = shape("model.language_model.layers.47.mlp.experts.gate_up_proj");
                    assert_eq!(e, [128, 1536, 2048]);
                    let v = "model.visual.blocks.26.mlp.linear_fc1.weight";
                    assert_eq!(shape(v), [4304, 1152]);
                    let ds = "model.visual.deepstack_merger_list.2.linear_fc2.weight";
                    assert_eq!(shape(ds), [2048, 4608]);
                }
                "deepseek-ocr2" => {
                    let sam = "model.sam_model.blocks.11.attn.rel_pos_h";
                    assert_eq!(shape(sam), [127, 64]);
                    assert_eq!(shape("model.sam_model.net_3.weight"), [896, 512, 3, 3]);
                    let q = "model.qwen2_model.model.model.layers.23.self_attn.k_proj.weight";
                    assert_eq!(shape(q), [128, 896]);
                    assert_eq!(shape("model.qwen2_model.query_1024.weight"), [256, 896]);
                    assert_eq!(shape("model.projector.layers.weight"), [1280, 896]);
                    assert_eq!(shape("model.layers.0.mlp.up_proj.weight"), [6848, 1280]);
                    let e = shape("model.layers.11.mlp.experts.gate_up_proj");
                    assert_eq!(e, [64, 1792, 1280]);
                }
                _ => {}
            }
        }
    }

    /// `--layout published` transposes exactly Qwen3-VL-MoE's two fused
    /// expert stacks (llama.cpp's converter reads gate_up_proj as [E, H, 2I])
    /// and is refused for presets it would not change.
    #[test]
    fn published_layout_transposes_only_qwen3_vl_moe_expert_stacks() {
        let config = preset("qwen3-vl-30b-a3b").expect("preset");
        let table = mllm_runtime::model_files::parameter_table(&config).expect("table");
        let moved: Vec<(String, Vec<usize>)> = table
            .iter()
            .filter_map(|(n, s)| published_shape("qwen3_vl_moe", n, s).map(|p| (n.clone(), p)))
            .collect();
        assert_eq!(moved.len(), 2 * 48, "{moved:?}");
        let find = |t: &str| moved.iter().find(|(n, _)| n == t).map(|(_, s)| s.clone());
        let l0 = "model.language_model.layers.0.mlp.experts";
        assert_eq!(
            find(&format!("{l0}.gate_up_proj")),
            Some(vec![128, 2048, 1536])
        );
        assert_eq!(find(&format!("{l0}.down_proj")), Some(vec![128, 768, 2048]));
        let qwen3_moe = "model.layers.0.mlp.experts.gate_up_proj";
        assert_eq!(
            published_shape("qwen3_moe", qwen3_moe, &[128, 1536, 2048]),
            None
        );
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("m");
        let err = run(
            "qwen3-30b-a3b",
            out.to_str().expect("utf-8"),
            "bf16",
            0,
            Some(1),
            "published",
        )
        .expect_err("qwen3-30b-a3b has no other layout");
        assert!(err.message().contains("--layout published"), "{err}");
        assert!(!out.exists(), "nothing is written for a refused layout");
        assert!(Layout::parse("hf").is_err());
        assert_eq!(Layout::parse("published").ok(), Some(Layout::Published));
    }

    #[test]
    fn norms_scaling_by_one_plus_w_start_near_zero() {
        assert_eq!(one_d_mean("gemma3_text", "model.norm.weight"), 0.0);
        let t = "qwen3_5_moe_text";
        assert_eq!(one_d_mean(t, "model.layers.0.input_layernorm.weight"), 0.0);
        assert_eq!(one_d_mean(t, "model.layers.3.self_attn.q_norm.weight"), 0.0);
        assert_eq!(one_d_mean(t, "model.layers.0.linear_attn.norm.weight"), 1.0);
        assert_eq!(one_d_mean(t, "model.layers.0.linear_attn.A_log"), 1.0);
        assert_eq!(one_d_mean("qwen3", "model.norm.weight"), 1.0);
    }
}
