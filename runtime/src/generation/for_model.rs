//! What the generation core takes from a loaded model: its end-of-sequence
//! ids, its vocabulary's size, and its vocabulary's trie for constrained
//! answers (built once, kept in `ModelFiles`).

use mllm_converter::tokenizer::Tokenizer;

use super::{
    Constraint, ConstraintError, ConstraintSpec, GenerationConfig, Grammars, SamplerConfig,
};
use crate::model_files::ModelFiles;

impl ModelFiles {
    /// The processor that keeps an answer to `spec` (a JSON schema, a
    /// grammar); the vocabulary's trie is built once per model.
    pub fn constraint(&self, spec: &ConstraintSpec) -> Result<Constraint, ConstraintError> {
        let grammars = self.grammars.get_or_init(|| {
            let tok = self.tokenizer.clone().ok_or_else(|| {
                ConstraintError("constrained decoding needs the model's tokenizer".into())
            })?;
            Grammars::new(tok, &self.eos).map(std::sync::Arc::new)
        });
        match grammars {
            Ok(g) => g.constraint(spec),
            Err(e) => Err(e.clone()),
        }
    }

    /// What an answer from this model is asked: its end-of-sequence ids
    /// and its tokenizer's vocabulary (so padded head rows are never
    /// drawn), with the caller's sampler, token limit and stop strings.
    pub fn generation_config(
        &self,
        sampler: SamplerConfig,
        max_new_tokens: usize,
        stops: Vec<String>,
    ) -> GenerationConfig {
        GenerationConfig {
            sampler,
            max_new_tokens,
            eos: self.eos.clone(),
            stops,
            vocab: self.tokenizer().ok().map(Tokenizer::vocab_size),
            ..Default::default()
        }
    }
}
