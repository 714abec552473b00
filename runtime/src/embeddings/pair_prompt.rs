//! How a decoder reranker (Qwen3-Reranker) sees a (query, document) pair:
//! one prompt, whose last token's logits decide.
//!
//! As sentence-transformers' `CrossEncoder` does for causal LMs, the pair
//! becomes two chat messages with the roles `query` and `document` (and a
//! `system` message carrying an instruction, when one is given), rendered
//! by the model's chat template. Published rerankers ship a template that
//! places both roles; one that drops either (the plain Qwen3 template of
//! the original Qwen3-Reranker upload) is detected by rendering probes, and
//! then Qwen3-Reranker's own prompt from its model card is used, if the
//! vocabulary is ChatML's.
//!
//! Too long a prompt is cut as sentence-transformers cuts it: the rendered
//! tokens are cut at the limit and the template's tail (the tokens every
//! pair ends with, found by rendering two skeleton pairs) is written back
//! over the end, so the last token is still the one the model answers from.

use mllm_converter::chat_template::{ChatMessage, ChatTemplate};

use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// Qwen3-Reranker's instruction when the request gives none.
pub const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

const QWEN3_SYSTEM: &str = "Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".";

/// Where a decoder reranker's prompt comes from.
#[derive(Clone, Copy)]
pub enum PairPrompt<'a> {
    /// The model's chat template places `query` and `document` messages.
    Template(&'a ChatTemplate),
    /// The model card's prompt of Qwen3-Reranker.
    Qwen3Reranker,
}

impl<'a> PairPrompt<'a> {
    /// The template when it carries pairs, else Qwen3-Reranker's prompt
    /// when the vocabulary has ChatML's markers, else an error saying why.
    pub fn for_model(
        template: Option<&'a ChatTemplate>,
        tokenizer: &Tokenizer,
        origin: &str,
    ) -> Result<PairPrompt<'a>> {
        let why = match template {
            None => "it has no chat template".to_string(),
            Some(t) => match pair_roles_failure(t) {
                None => return Ok(PairPrompt::Template(t)),
                Some(why) => why,
            },
        };
        if tokenizer.token_to_id("<|im_start|>").is_some()
            && tokenizer.token_to_id("<|im_end|>").is_some()
        {
            return Ok(PairPrompt::Qwen3Reranker);
        }
        Err(Error::invalid(format!("{origin} cannot rerank: {why}, and its vocabulary is not ChatML's (Qwen3-Reranker's prompt needs <|im_start|> and <|im_end|>); give the model a chat template (chat_template.jinja) that renders messages with the roles \"query\" and \"document\""
        )))
    }

    /// The prompt of one pair.
    pub fn render(&self, query: &str, document: &str, instruction: Option<&str>) -> Result<String> {
        match self {
            PairPrompt::Template(t) => {
                let mut msgs = Vec::with_capacity(3);
                if let Some(i) = instruction {
                    msgs.push(ChatMessage::new("system", i));
                }
                msgs.push(ChatMessage::new("query", query));
                msgs.push(ChatMessage::new("document", document));
                Ok(t.render(&msgs, false, &[])?)
            }
            PairPrompt::Qwen3Reranker => Ok(format!(
                "<|im_start|>system\n{QWEN3_SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {}\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                instruction.unwrap_or(DEFAULT_INSTRUCTION)
            )),
        }
    }

    /// The tokens every pair's prompt ends with (the template's tail), for
    /// an instruction: the longest common token suffix of two skeleton
    /// pairs whose contents tokenize differently, as sentence-transformers
    /// finds it. Empty when the renders never differ.
    pub fn tail(&self, tokenizer: &Tokenizer, instruction: Option<&str>) -> Result<Vec<u32>> {
        let a = tokenizer.encode(&self.render("0", "0", instruction)?, false)?;
        let b = tokenizer.encode(&self.render("1 2 3 4", "1 2 3 4", instruction)?, false)?;
        let common = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        if common == 0 || common >= a.len().min(b.len()) {
            return Ok(vec![]);
        }
        Ok(a[a.len() - common..].to_vec())
    }
}

/// Why `t` cannot carry a pair (the query's or the document's content does
/// not reach the prompt, or rendering fails), or `None` when it can.
fn pair_roles_failure(t: &ChatTemplate) -> Option<String> {
    let render = |q: &str, d: &str| {
        t.render(
            &[
                ChatMessage::new("query", q),
                ChatMessage::new("document", d),
            ],
            false,
            &[],
        )
    };
    let probe = || -> std::result::Result<Option<String>, String> {
        let base = render("first query", "first document").map_err(|e| e.to_string())?;
        let q = render("second query", "first document").map_err(|e| e.to_string())?;
        let d = render("first query", "second document").map_err(|e| e.to_string())?;
        Ok(match (q == base, d == base) {
            (false, false) => None,
            (true, true) => Some(
                "its chat template places neither a \"query\" nor a \"document\" message".into(),
            ),
            (true, false) => Some("its chat template does not place a \"query\" message".into()),
            (false, true) => Some("its chat template does not place a \"document\" message".into()),
        })
    };
    match probe() {
        Ok(v) => v,
        Err(e) => Some(format!(
            "its chat template fails on a query/document pair ({e})"
        )),
    }
}

/// `ids` cut to `max` tokens with `tail` written back over the end.
pub fn cut_keeping_tail(mut ids: Vec<u32>, max: usize, tail: &[u32]) -> Vec<u32> {
    ids.truncate(max);
    let keep = tail.len().min(ids.len());
    let n = ids.len();
    ids[n - keep..].copy_from_slice(&tail[tail.len() - keep..]);
    ids
}

#[cfg(test)]
mod tests {
    use super::cut_keeping_tail;

    #[test]
    fn cut_writes_the_tail_over_the_end() {
        assert_eq!(
            cut_keeping_tail(vec![1, 2, 3, 4, 5, 6], 4, &[8, 9]),
            vec![1, 2, 8, 9]
        );
        assert_eq!(cut_keeping_tail(vec![1, 2, 3], 2, &[7, 8, 9]), vec![8, 9]);
        assert_eq!(cut_keeping_tail(vec![1, 2, 3], 5, &[]), vec![1, 2, 3]);
    }
}
