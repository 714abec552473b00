//! Quantization recipes: which stored type each tensor gets. A recipe is
//! the type the user asked for plus name-pattern rules, first match wins;
//! fixed policies (FORMAT.md, "Recipe") keep 1-D tensors f32, i32 tensors
//! unchanged, and fall back to a type that fits when a block type does not
//! divide a tensor's rows. `plan` is the one place those decisions are made.
//!
//! Recipe files are text, one `PATTERN TYPE` rule per line, `#` comments;
//! the default rules of the requested type follow them, so a file lists
//! only its exceptions:
//!
//! ```text
//! # keep attention output projections more precise
//! *.self_attn.o_proj.weight  q8_0
//! model.layers.0.*           f16
//! ```

use mllm_backends::quant::QuantType;
use serde_json::{json, Value};

use super::types::StoredType;

/// One rule: tensors whose name matches `pattern` get `ty`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub pattern: String,
    pub ty: StoredType,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Recipe {
    /// What the user asked for (`q4_0`), as typed.
    pub ty: String,
    pub rules: Vec<Rule>,
    /// Where the rules came from, for people reading `mllm inspect`.
    pub origin: String,
}

/// The outcome for one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub stored: StoredType,
    pub requested: StoredType,
}

/// Whether `name` matches `pattern`: `*` any run of characters (dots
/// included), `?` one character, everything else literally.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point per `*`: linear-ish, no
    // recursion, so hostile patterns cannot blow the stack.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn rule(pattern: &str, ty: StoredType) -> Rule {
    Rule {
        pattern: pattern.to_string(),
        ty,
    }
}

impl Recipe {
    /// The default rules for `ty`: the embeddings and the output projection,
    /// to which quality is most sensitive, at q8_0 for the 32-wide 4-bit
    /// types and q6_k for the K-quants; q4_k also keeps attention values and
    /// MLP down projections at q6_k (llama.cpp's Q4_K_M does so in the first
    /// and last eighth of the layers and every third one between; it keeps
    /// untied embeddings at q4_k); everything else at `ty`. w4a16 keeps those two at q8_0 as well; w8a8 (8 bits
    /// already) applies everywhere. Below 8 bits, vision towers get q8_0.
    pub fn default_rules(ty: StoredType) -> Vec<Rule> {
        use QuantType as Q;
        let q = StoredType::Quant;
        let mut rules = vec![];
        // Vision towers (Qwen-VL's `model.visual.*`; DeepSeek-OCR 2's SAM,
        // second encoder and projector) stay at >= 8 bits: their errors
        // reach every image token, and they are a small part of the weights.
        let below_8_bits = matches!(
            ty,
            StoredType::Quant(Q::Q4_0 | Q::Q4_1 | Q::Q4_K | Q::Q5_K | Q::Q6_K | Q::W4A16 { .. })
        );
        if below_8_bits {
            for tower in [
                "model.visual.*",
                "model.sam_model.*",
                "model.qwen2_model.*",
                "model.projector.*",
            ] {
                rules.push(rule(tower, q(Q::Q8_0)));
            }
        }
        let precise = match ty {
            StoredType::Quant(Q::Q4_0 | Q::Q4_1 | Q::W4A16 { .. }) => Some(q(Q::Q8_0)),
            StoredType::Quant(Q::Q4_K | Q::Q5_K) => Some(q(Q::Q6_K)),
            _ => None,
        };
        if let Some(p) = precise {
            rules.push(rule("*embed_tokens.weight", p));
            rules.push(rule("lm_head.weight", p));
        }
        if ty == q(Q::Q4_K) {
            rules.push(rule("*.self_attn.v_proj.weight", q(Q::Q6_K)));
            rules.push(rule("*.mlp.down_proj.weight", q(Q::Q6_K)));
        }
        rules.push(rule("*", ty));
        rules
    }

    pub fn default_for(ty: StoredType) -> Recipe {
        Recipe {
            ty: ty.name().to_string(),
            rules: Recipe::default_rules(ty),
            origin: format!("default recipe for {ty}"),
        }
    }

    /// `keep`: every tensor stays in its source type (a GGUF's Q4_K_M mix
    /// as it was, a bf16 checkpoint in bf16), after the rules of `file`
    /// (`(text, origin)` of a recipe file) when one is given. No default
    /// rule follows, so an unmatched tensor is requested as its source.
    pub fn keep(file: Option<(&str, &str)>) -> Result<Recipe, String> {
        let (rules, origin) = match file {
            Some((text, origin)) => (parse_rules(text, origin)?, origin.to_string()),
            None => (vec![], "every tensor keeps its source type".to_string()),
        };
        Ok(Recipe {
            ty: KEEP.to_string(),
            rules,
            origin,
        })
    }

    /// Parses a recipe file's rules; the defaults of `ty` follow them.
    pub fn parse(text: &str, origin: &str, ty: StoredType) -> Result<Recipe, String> {
        let mut rules = parse_rules(text, origin)?;
        rules.extend(Recipe::default_rules(ty));
        Ok(Recipe {
            ty: ty.name().to_string(),
            rules,
            origin: origin.to_string(),
        })
    }

    /// The type the first matching rule names.
    pub fn requested(&self, name: &str) -> Option<StoredType> {
        self.rules
            .iter()
            .find(|r| glob_match(&r.pattern, name))
            .map(|r| r.ty)
    }

    /// The stored type of a tensor whose source type is `source` (a plain
    /// dtype, or a GGUF block type) and shape is `shape`.
    pub fn plan(&self, name: &str, source: StoredType, shape: &[usize]) -> Plan {
        if source == StoredType::I32 {
            return Plan {
                stored: source,
                requested: source,
            };
        }
        if shape.len() < 2 {
            // A policy, not a fallback: nothing to report.
            return Plan {
                stored: StoredType::F32,
                requested: StoredType::F32,
            };
        }
        let requested = self.requested(name).unwrap_or(source).for_shape(shape);
        Plan {
            stored: fitting(requested, source, shape),
            requested,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "type": self.ty,
            "rules": self.rules.iter().map(|r| json!({"pattern": r.pattern, "type": r.ty.name()})).collect::<Vec<_>>(),
            "origin": self.origin,
        })
    }

    pub fn from_json(v: &Value) -> Result<Recipe, String> {
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .ok_or("no \"type\" string")?
            .to_string();
        let rules = v
            .get("rules")
            .and_then(Value::as_array)
            .ok_or("no \"rules\" list")?
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let pattern = r.get("pattern").and_then(Value::as_str);
                let t = r.get("type").and_then(Value::as_str);
                match (pattern, t.and_then(StoredType::parse)) {
                    (Some(p), Some(t)) => Ok(rule(p, t)),
                    _ => Err(format!(
                        "rule {i} is not {{\"pattern\": string, \"type\": a known type}}"
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let origin = v
            .get("origin")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        Ok(Recipe { ty, rules, origin })
    }
}

/// All type names, for messages.
pub fn type_names() -> String {
    StoredType::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `want`, or the nearest type whose blocks divide the rows of `shape`.
fn fitting(want: StoredType, source: StoredType, shape: &[usize]) -> StoredType {
    let row = shape.last().copied().unwrap_or(1);
    let mut t = want;
    loop {
        if row.is_multiple_of(t.block_size()) {
            return t;
        }
        t = match t {
            StoredType::Quant(QuantType::Q4_K) => StoredType::Quant(QuantType::Q4_1),
            StoredType::Quant(QuantType::W4A16 { group: 128 }) => {
                StoredType::Quant(QuantType::W4A16 { group: 64 })
            }
            StoredType::Quant(QuantType::W4A16 { group: 64 }) => {
                StoredType::Quant(QuantType::W4A16 { group: 32 })
            }
            StoredType::Quant(QuantType::W4A16 { .. }) => StoredType::Quant(QuantType::Q8_0),
            StoredType::Quant(QuantType::Q5_K | QuantType::Q6_K) => {
                StoredType::Quant(QuantType::Q8_0)
            }
            // f16 cannot hold bf16's range; keep such sources in bf16.
            _ if source == StoredType::BF16 => StoredType::BF16,
            _ => StoredType::F16,
        };
    }
}

/// The type name `convert` takes for "every tensor as it is".
pub const KEEP: &str = "keep";

/// The `PATTERN TYPE` rules of a recipe file, in order.
fn parse_rules(text: &str, origin: &str) -> Result<Vec<Rule>, String> {
    let mut rules = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(pattern), Some(t), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "{origin}:{}: expected `PATTERN TYPE`, found `{line}`",
                i + 1
            ));
        };
        let t = StoredType::parse(t).ok_or_else(|| {
            format!(
                "{origin}:{}: unknown type `{t}` (known: {})",
                i + 1,
                type_names()
            )
        })?;
        if t == StoredType::I32 {
            return Err(format!(
                "{origin}:{}: i32 is not a type weights can be converted to",
                i + 1
            ));
        }
        rules.push(rule(pattern, t));
    }
    Ok(rules)
}
