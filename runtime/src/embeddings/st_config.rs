//! What a sentence-transformers model says about turning hidden states
//! into embeddings: `modules.json` (is there a `Pooling` module, a
//! `Normalize` one), the pooling module's `config.json` (its mode),
//! `sentence_bert_config.json` (`max_seq_length`) and
//! `config_sentence_transformers.json` (named prompts). They are read from
//! a model directory, or from the copy `convert` keeps in a `.mllm` file's
//! config (`mllm_converter::sentence_transformers`); a model without them
//! (a plain transformers checkpoint, a GGUF) gets the defaults of its kind.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::pooling::Pooling;
use crate::{Error, Result};

/// Settings read from a model's sentence-transformers files.
#[derive(Clone, Debug, PartialEq)]
pub struct StConfig {
    pub pooling: Pooling,
    pub normalize: bool,
    /// Tokens the model is used with (`max_seq_length`), when it says.
    pub max_seq_length: Option<usize>,
    /// Named prompts prepended to inputs (`"query": "query: "`).
    pub prompts: BTreeMap<String, String>,
    /// The prompt used when none is named.
    pub default_prompt_name: Option<String>,
    /// Whether the settings came from sentence-transformers files.
    pub from_files: bool,
}

impl StConfig {
    /// Defaults for a model without sentence-transformers files: mean
    /// pooling for encoders (what sentence-transformers itself builds for a
    /// plain transformers checkpoint), the last token for decoders (their
    /// last position is the only one that saw the whole input); normalised,
    /// as OpenAI's and llama-server's embeddings are.
    pub fn defaults(decoder: bool) -> StConfig {
        StConfig {
            pooling: if decoder {
                Pooling::Last
            } else {
                Pooling::Mean
            },
            normalize: true,
            max_seq_length: None,
            prompts: BTreeMap::new(),
            default_prompt_name: None,
            from_files: false,
        }
    }

    /// Reads the files (as `mllm_converter::sentence_transformers::files`
    /// gathers them, keyed by their paths); `origin` names where they came
    /// from in errors. No files: `defaults(decoder)`.
    pub fn from_files(files: Option<&Json>, decoder: bool, origin: &str) -> Result<StConfig> {
        let mut c = StConfig::defaults(decoder);
        let Some(files) = files else {
            return Ok(c);
        };
        let file = |name: &str| files.get(name);
        let err = |name: &str, e: String| Error::load(format!("{origin}: {name}: {e}"));
        c.from_files = true;
        let list = file("modules.json")
            .and_then(Json::as_array)
            .ok_or_else(|| err("modules.json", "expected a list of modules".into()))?;
        let kind = |m: &Json| {
            m.get("type")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string()
        };
        c.normalize = list.iter().any(|m| kind(m).ends_with(".Normalize"));
        if let Some(p) = list.iter().find(|m| kind(m).ends_with(".Pooling")) {
            let name = format!(
                "{}/config.json",
                p.get("path").and_then(Json::as_str).unwrap_or("")
            );
            if let Some(pc) = file(&name) {
                c.pooling = pooling_mode(pc).map_err(|e| err(&name, e))?;
            }
        }
        if let Some(sb) = file("sentence_bert_config.json") {
            c.max_seq_length = sb
                .get("max_seq_length")
                .and_then(Json::as_u64)
                .map(|n| n as usize);
        }
        if let Some(cfg) = file("config_sentence_transformers.json") {
            if let Some(p) = cfg.get("prompts").and_then(Json::as_object) {
                for (k, v) in p {
                    if let Some(s) = v.as_str() {
                        c.prompts.insert(k.clone(), s.to_string());
                    }
                }
            }
            c.default_prompt_name = cfg
                .get("default_prompt_name")
                .and_then(Json::as_str)
                .map(str::to_string);
        }
        Ok(c)
    }

    /// The text put before each input: the named prompt, else the default
    /// one, else nothing. An unknown name is an error listing the known.
    pub fn prompt(&self, name: Option<&str>) -> Result<&str> {
        let Some(name) = name.or(self.default_prompt_name.as_deref()) else {
            return Ok("");
        };
        self.prompts.get(name).map(String::as_str).ok_or_else(|| {
            let known: Vec<&str> = self.prompts.keys().map(String::as_str).collect();
            Error::load(format!(
                "the model has no prompt named `{name}` (its prompts: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }
}

/// The one pooling a sentence-transformers `Pooling` config turns on.
fn pooling_mode(pc: &Json) -> std::result::Result<Pooling, String> {
    if let Some(m) = pc.get("pooling_mode").and_then(Json::as_str) {
        return m.parse();
    }
    let on = |k: &str| pc.get(k).and_then(Json::as_bool).unwrap_or(false);
    let modes = [
        ("pooling_mode_mean_tokens", Some(Pooling::Mean)),
        ("pooling_mode_cls_token", Some(Pooling::Cls)),
        ("pooling_mode_lasttoken", Some(Pooling::Last)),
        ("pooling_mode_max_tokens", None),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ];
    let chosen: Vec<_> = modes.iter().filter(|(k, _)| on(k)).collect();
    match chosen.as_slice() {
        [] => Ok(Pooling::Mean),
        [(_, Some(p))] => Ok(*p),
        [(k, None)] => Err(format!(
            "`{k}` is not supported (mllm pools by mean, cls or last token)"
        )),
        _ => Err(format!(
            "several pooling modes are on ({}); mllm uses one",
            chosen
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` into a fresh directory and reads them back as
    /// `convert` and the runtime gather them.
    fn read(files: &[(&str, &str)], decoder: bool) -> Result<StConfig> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "mllm-st-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        for (name, text) in files {
            let p = d.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(&d).unwrap();
        let gathered = mllm_converter::sentence_transformers::files(&d).unwrap();
        let config = StConfig::from_files(gathered.as_ref(), decoder, "test");
        std::fs::remove_dir_all(&d).unwrap();
        config
    }

    #[test]
    fn minilm_layout_reads_as_mean_normalized_256() {
        let c = read(&[
            ("modules.json", r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#),
            ("1_Pooling/config.json", r#"{"word_embedding_dimension":384,"pooling_mode_cls_token":false,"pooling_mode_mean_tokens":true}"#),
            ("sentence_bert_config.json", r#"{"max_seq_length":256}"#),
        ], false).unwrap();
        assert_eq!(
            (c.pooling, c.normalize, c.max_seq_length),
            (Pooling::Mean, true, Some(256))
        );
        assert_eq!(c.prompt(None).unwrap(), "");
    }

    #[test]
    fn cls_without_normalize_and_prompts() {
        let c = read(&[
            ("modules.json", r#"[{"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#),
            ("1_Pooling/config.json", r#"{"pooling_mode_cls_token":true}"#),
            ("config_sentence_transformers.json", r#"{"prompts":{"query":"query: ","document":""},"default_prompt_name":"document"}"#),
        ], false).unwrap();
        assert_eq!((c.pooling, c.normalize), (Pooling::Cls, false));
        assert_eq!(c.prompt(Some("query")).unwrap(), "query: ");
        assert_eq!(c.prompt(None).unwrap(), "");
        let e = c.prompt(Some("passage")).unwrap_err().to_string();
        assert!(
            e.contains("`passage`") && e.contains("document, query"),
            "{e}"
        );
    }

    #[test]
    fn unsupported_or_ambiguous_modes_are_errors() {
        for (cfg, want) in [
            (
                r#"{"pooling_mode_max_tokens":true}"#,
                "pooling_mode_max_tokens",
            ),
            (
                r#"{"pooling_mode_mean_tokens":true,"pooling_mode_cls_token":true}"#,
                "several",
            ),
        ] {
            let e = read(
                &[
                    (
                        "modules.json",
                        r#"[{"path":"p","type":"sentence_transformers.models.Pooling"}]"#,
                    ),
                    ("p/config.json", cfg),
                ],
                false,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(want) && e.contains("config.json"), "{e}");
        }
    }

    #[test]
    fn plain_checkpoints_get_their_kinds_default() {
        assert_eq!(read(&[], false).unwrap().pooling, Pooling::Mean);
        assert_eq!(read(&[], true).unwrap().pooling, Pooling::Last);
        assert!(read(&[], true).unwrap().normalize);
    }
}
