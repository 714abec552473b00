//! The Llama family (`llama`: Llama 2/3, TinyLlama, SmolLM2,
//! models/llama.mdl) and SmolLM3 (`smollm3`, models/smollm3.mdl): llama.cpp's
//! converter permuted their q/k rows for its rope; SmolLM3's NoPE layers
//! come from a fixed interval.

use serde_json::json;

use super::{Family, DECODER};

pub(super) const LLAMA: Family = Family {
    arch: "llama",
    class: "LlamaForCausalLM",
    model_type: "llama",
    permuted_qk: true,
    ..DECODER
};

pub(super) const SMOLLM3: Family = Family {
    arch: "smollm3",
    class: "SmolLM3ForCausalLM",
    model_type: "smollm3",
    // llama.cpp stores no NoPE layer list: every 4th layer takes no rope
    // (`n_no_rope_layer_step = 4`), SmolLM3-3B's published
    // `no_rope_layer_interval`; the script derives the list from it.
    config: |k| {
        k.c.insert("no_rope_layer_interval".into(), json!(4));
        Ok(())
    },
    ..LLAMA
};
