//! The stdlib and model scripts, embedded so an installed `mllm` works from
//! any folder. A file on disk with the same name takes precedence.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mllm_dsl::ast::Item;
use mllm_dsl::Resolver;

pub const STDLIB: &[(&str, &str)] = &[
    ("nn", include_str!("../../stdlib/nn.mdl")),
    ("vision", include_str!("../../stdlib/vision.mdl")),
    ("linear_attn", include_str!("../../stdlib/linear_attn.mdl")),
    (
        "qwen3_5_base",
        include_str!("../../stdlib/qwen3_5_base.mdl"),
    ),
    ("qwen_vl", include_str!("../../stdlib/qwen_vl.mdl")),
    (
        "deepseek_ocr2_vision",
        include_str!("../../stdlib/deepseek_ocr2_vision.mdl"),
    ),
];

pub const MODELS: &[(&str, &str)] = &[
    ("qwen3", include_str!("../../models/qwen3.mdl")),
    ("llama", include_str!("../../models/llama.mdl")),
    ("qwen2", include_str!("../../models/qwen2.mdl")),
    ("qwen3_vl", include_str!("../../models/qwen3_vl.mdl")),
    (
        "qwen3_vl_moe",
        include_str!("../../models/qwen3_vl_moe.mdl"),
    ),
    ("smollm3", include_str!("../../models/smollm3.mdl")),
    ("qwen3_moe", include_str!("../../models/qwen3_moe.mdl")),
    ("gemma3", include_str!("../../models/gemma3.mdl")),
    ("qwen3_5", include_str!("../../models/qwen3_5.mdl")),
    ("qwen3_5_moe", include_str!("../../models/qwen3_5_moe.mdl")),
    (
        "deepseek_ocr2",
        include_str!("../../models/deepseek_ocr2.mdl"),
    ),
    ("bert", include_str!("../../models/bert.mdl")),
];

/// Every module the built-in model scripts declare, with its script's
/// name: the scripts parsed once (a module name is declared by one script
/// only: `module_names_are_unique`).
fn declared_modules() -> &'static [(String, &'static str)] {
    static TABLE: OnceLock<Vec<(String, &'static str)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![];
        for (i, (name, text)) in MODELS.iter().enumerate() {
            let (file, _) = mllm_dsl::parser::parse(text, i);
            for item in file.items {
                if let Item::Module(m) = item {
                    table.push((m.name.name, *name));
                }
            }
        }
        table
    })
}

/// The built-in script serving a checkpoint: the one that declares a module
/// named exactly like the config's `architectures[0]` (so adding an
/// architecture is adding a script), else the one named like its
/// `model_type`.
pub fn script_for_config(config: &serde_json::Value) -> Result<&'static str, String> {
    let arch = config
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(|a| a.as_str());
    if let Some(arch) = arch {
        if let Some((_, script)) = declared_modules().iter().find(|(m, _)| m == arch) {
            return Ok(script);
        }
    }
    let model_type = config.get("model_type").and_then(|m| m.as_str());
    if let Some((name, _)) = MODELS.iter().find(|(n, _)| Some(*n) == model_type) {
        return Ok(name);
    }
    Err(format!(
        "no built-in script for architecture {} (model_type {}); built in: {}. Pass a script with --script FILE.mdl",
        arch.unwrap_or("?"),
        model_type.unwrap_or("?"),
        MODELS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    ))
}

/// Finds a script: the path on disk if it exists, else an embedded model
/// named by the path's stem (`models/qwen3.mdl` or `qwen3`).
pub fn load_script(path: &str) -> Result<(String, String), String> {
    let p = Path::new(path);
    if p.is_file() {
        return std::fs::read_to_string(p)
            .map(|t| (path.to_string(), t))
            .map_err(|e| format!("cannot read {path}: {e}"));
    }
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or(path);
    match MODELS.iter().find(|(n, _)| *n == stem) {
        Some((n, text)) => Ok((format!("<builtin>/models/{n}.mdl"), text.to_string())),
        None => Err(format!(
            "{path} does not exist and is not a built-in model script (built in: {})",
            MODELS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Resolves `import NAME`: `NAME.mdl` beside the script, then
/// `../stdlib/NAME.mdl` from the script's folder (a source checkout), then
/// `$MLLM_STDLIB/NAME.mdl`, then the embedded stdlib.
pub struct ScriptResolver {
    pub dir: Option<PathBuf>,
}

impl ScriptResolver {
    pub fn for_script(script: &str) -> ScriptResolver {
        let p = Path::new(script);
        ScriptResolver {
            dir: p
                .is_file()
                .then(|| p.parent().unwrap_or(Path::new(".")).to_path_buf()),
        }
    }
}

impl Resolver for ScriptResolver {
    fn resolve(&self, name: &str) -> Option<(String, String)> {
        if name.contains('/') || name.contains('\\') || name.contains("..") {
            return None;
        }
        let file = format!("{name}.mdl");
        let mut candidates = vec![];
        if let Some(d) = &self.dir {
            candidates.push(d.join(&file));
            candidates.push(d.join("..").join("stdlib").join(&file));
        }
        if let Ok(d) = std::env::var("MLLM_STDLIB") {
            candidates.push(Path::new(&d).join(&file));
        }
        for c in candidates {
            if let Ok(text) = std::fs::read_to_string(&c) {
                return Some((c.display().to_string(), text));
            }
        }
        STDLIB
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, t)| (format!("<builtin>/stdlib/{n}.mdl"), t.to_string()))
    }
}

/// Checks a script; on success returns the program, else the rendered
/// diagnostics.
pub fn check_script(path: &str) -> crate::Result<mllm_dsl::Program> {
    let (name, text) = load_script(path).map_err(|e| crate::Error::load(e.to_string()))?;
    let (prog, diags) = mllm_dsl::check(&name, &text, &ScriptResolver::for_script(path));
    if diags.is_empty() {
        return Ok(prog);
    }
    let n = diags.len();
    Err(crate::Error::diagnostics(
        crate::ErrorKind::Script,
        |color| {
            let mut out = mllm_dsl::diagnostic::render_all(&diags, &prog.sources, color);
            out.push_str(&format!(
                "\n{name}: {n} error{}",
                if n == 1 { "" } else { "s" }
            ));
            out
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_are_unique() {
        let table = declared_modules();
        assert!(table.len() >= MODELS.len(), "every script declares modules");
        for (i, (m, script)) in table.iter().enumerate() {
            if let Some((_, other)) = table[i + 1..].iter().find(|(n, _)| n == m) {
                panic!("module {m} is declared by both {script} and {other}");
            }
        }
    }

    /// Adding a GGUF family (converter/src/gguf/family/) without its
    /// script, or naming a class no script declares, fails here.
    #[test]
    fn every_gguf_family_has_a_built_in_script() {
        let families = mllm_converter::gguf::gguf_families();
        assert!(families.len() >= 12, "{families:?}");
        for (arch, class, vision) in families {
            for c in std::iter::once(class).chain(vision) {
                let config = serde_json::json!({ "architectures": [c] });
                let found = declared_modules().iter().any(|(m, _)| m == c);
                assert!(
                    found,
                    "GGUF `{arch}` loads as {c}, which no built-in script declares"
                );
                assert!(script_for_config(&config).is_ok(), "{arch}: {c}");
            }
        }
    }

    #[test]
    fn architectures_match_module_names_exactly() {
        let config = |arch: &str| serde_json::json!({ "architectures": [arch] });
        assert_eq!(script_for_config(&config("Qwen3ForCausalLM")), Ok("qwen3"));
        assert_eq!(
            script_for_config(&config("Qwen3MoeForCausalLM")),
            Ok("qwen3_moe")
        );
        // Not a prefix, a suffix or a name in a comment.
        for near in ["Qwen3ForCausal", "Qwen3ForCausalLMX", "XQwen3ForCausalLM"] {
            assert!(script_for_config(&config(near)).is_err(), "{near}");
        }
    }
}
