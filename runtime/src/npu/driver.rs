//! The host loop over exported static graphs (docs/npu.md, "Driving the KV
//! cache from the host"): the KV cache lives here, in zeroed float32
//! buffers of `context` rows per layer; each step feeds token ids,
//! positions `past_len..`, `past_len` and every past buffer to a
//! `StaticGraph`, copies the step's `present_*` rows into rows
//! `past_len..` of the buffers and advances `past_len`. A prompt runs in
//! chunks of the prefill graph (the last chunk padded when it fits, else
//! token by token), then generation runs the 1-token decode graph. Any
//! vendor's runtime, or the CPU reference (`reference.rs`), is the graph.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use mllm_backends::npu::{HostData, StaticGraph};

use super::io::GraphIo;
use crate::engine::{decode_loop, Decoder, GenStats};
use crate::generation::Generation;
use crate::{Error, Result};

/// One graph with what io.json says of it, and its output buffers (made
/// once, reused every step).
pub struct Stage {
    pub graph: Box<dyn StaticGraph>,
    pub io: GraphIo,
    logits: Vec<f32>,
    present: Vec<(Vec<f32>, Vec<f32>)>,
    /// The rotary tables io.json lists under `rope` (cos, sin), all rows.
    rope: Vec<(Vec<f32>, Vec<f32>)>,
}

fn read_table(path: &Path, rows: usize, width: usize) -> Result<Vec<f32>> {
    let bytes = std::fs::read(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
    if bytes.len() != rows * width * 4 {
        return Err(err(format!(
            "{}: {} bytes; io.json says float32 [{rows}, {width}]",
            path.display(),
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

impl Stage {
    /// A graph whose rotary tables (if io.json lists any) are files in `dir`.
    pub fn with_tables(graph: Box<dyn StaticGraph>, io: GraphIo, dir: &Path) -> Result<Stage> {
        let mut rope = vec![];
        for t in &io.rope {
            rope.push((
                read_table(&dir.join(&t.cos_file), t.rows, t.width)?,
                read_table(&dir.join(&t.sin_file), t.rows, t.width)?,
            ));
        }
        let mut s = Stage::new(graph, io);
        s.rope = rope;
        Ok(s)
    }

    /// A graph without rotary-table inputs.
    pub fn new(graph: Box<dyn StaticGraph>, io: GraphIo) -> Stage {
        let rows = |name: &str| io.output(name).map_or(0, |p| p.numel());
        let present = io
            .layers
            .iter()
            .map(|l| {
                (
                    vec![0.0; rows(&l.present_key)],
                    vec![0.0; rows(&l.present_value)],
                )
            })
            .collect();
        Stage {
            logits: vec![0.0; io.seq * io.vocab],
            present,
            rope: vec![],
            graph,
            io,
        }
    }
}

/// The KV cache in host memory and the graphs that advance it.
pub struct HostLoop {
    prefill: Option<Stage>,
    decode: Stage,
    context: usize,
    /// Per layer (in io.json's order): keys and values, `context` rows each.
    past: Vec<(Vec<f32>, Vec<f32>)>,
    past_len: usize,
    /// The tokens the cache holds (a sampler's repetition history).
    pub tokens: Vec<u32>,
    /// The id that pads a prompt's last prefill chunk (its rows are never
    /// copied into the cache, and causal attention keeps them from the
    /// real tokens).
    pub pad_id: u32,
    /// Steps run so far, per graph (prefill, decode): for tests and stats.
    pub steps: (usize, usize),
}

fn err(msg: impl Into<String>) -> Error {
    Error::load(msg)
}

impl HostLoop {
    /// `decode` must be a 1-token graph; `prefill` (optional) a graph of
    /// more tokens over the same cache (same layers, shapes and context).
    pub fn new(prefill: Option<Stage>, decode: Stage) -> Result<HostLoop> {
        if decode.io.seq != 1 {
            return Err(err(format!(
                "the decode graph takes {} tokens a step, not 1 (export it with --seq 1)",
                decode.io.seq
            )));
        }
        if let Some(p) = &prefill {
            let same = p.io.context == decode.io.context
                && p.io.vocab == decode.io.vocab
                && p.io.layers == decode.io.layers
                && p.io.layers.iter().all(|l| {
                    p.io.input(&l.past_key) == decode.io.input(&l.past_key)
                        && p.io.input(&l.past_value) == decode.io.input(&l.past_value)
                });
            if !same {
                return Err(err(format!(
                    "the prefill graph ({}) and the decode graph ({}) do not share one cache: export both from the same model with the same --context",
                    p.graph.label(),
                    decode.graph.label()
                )));
            }
        }
        let io = &decode.io;
        let past = io
            .layers
            .iter()
            .map(|l| {
                let n = |name: &str| io.input(name).map_or(0, |p| p.numel());
                (vec![0.0; n(&l.past_key)], vec![0.0; n(&l.past_value)])
            })
            .collect();
        Ok(HostLoop {
            context: io.context,
            prefill,
            decode,
            past,
            past_len: 0,
            tokens: vec![],
            pad_id: 0,
            steps: (0, 0),
        })
    }

    /// Rows of the cache.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Rows holding tokens.
    pub fn past_len(&self) -> usize {
        self.past_len
    }

    pub fn vocab(&self) -> usize {
        self.decode.io.vocab
    }

    /// Tokens per prefill step (1 without a prefill graph).
    pub fn chunk(&self) -> usize {
        self.prefill.as_ref().map_or(1, |p| p.io.seq)
    }

    /// An empty, zeroed cache.
    pub fn reset(&mut self) {
        for (k, v) in &mut self.past {
            k.fill(0.0);
            v.fill(0.0);
        }
        self.past_len = 0;
        self.tokens.clear();
    }

    /// Appends `ids` to the cache; returns the logits after the last.
    pub fn feed(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(err("nothing to feed: no token ids"));
        }
        if self.past_len + ids.len() > self.context {
            return Err(err(format!(
                "{} tokens after {} do not fit the graphs' cache of {} rows (export with a larger --context)",
                ids.len(),
                self.past_len,
                self.context
            )));
        }
        let mut logits = vec![];
        let mut rest = ids;
        while !rest.is_empty() {
            let n = self.chunk();
            // A full chunk of the prefill graph, or the last one padded when
            // the padding fits the cache; else 1-token decode steps.
            let prefill =
                n > 1 && rest.len() > 1 && (rest.len() >= n || self.past_len + n <= self.context);
            let take = if prefill { rest.len().min(n) } else { 1 };
            logits = self.step(&rest[..take], prefill)?;
            rest = &rest[take..];
        }
        Ok(logits)
    }

    /// One step of `real` tokens through the prefill graph (`prefill`) or
    /// the decode graph.
    fn step(&mut self, real: &[u32], prefill: bool) -> Result<Vec<f32>> {
        let stage = match (&mut self.prefill, prefill) {
            (Some(p), true) => p,
            _ => &mut self.decode,
        };
        let n = stage.io.seq;
        let p = self.past_len;
        let mut ids = vec![self.pad_id as i64; n];
        for (d, &t) in ids.iter_mut().zip(real) {
            *d = t as i64;
        }
        let positions: Vec<i64> = (p..p + n).map(|i| i as i64).collect();
        let past_len = [p as i64];
        let mut inputs: Vec<(&str, HostData)> = vec![
            ("input_ids", HostData::I64(&ids)),
            ("past_len", HostData::I64(&past_len)),
        ];
        if stage.io.input("positions").is_some() {
            inputs.push(("positions", HostData::I64(&positions)));
        }
        if stage.rope.len() != stage.io.rope.len() {
            return Err(err(format!(
                "{} takes rotary tables; open it with Stage::with_tables",
                stage.graph.label()
            )));
        }
        // Rows p..p+n of each table: the positions of this step.
        for (t, (cos, sin)) in stage.io.rope.iter().zip(&stage.rope) {
            let rows = p * t.width..(p + n) * t.width;
            inputs.push((&t.cos_input, HostData::F32(&cos[rows.clone()])));
            inputs.push((&t.sin_input, HostData::F32(&sin[rows])));
        }
        for (l, (k, v)) in stage.io.layers.iter().zip(&self.past) {
            inputs.push((&l.past_key, HostData::F32(k)));
            inputs.push((&l.past_value, HostData::F32(v)));
        }
        let mut outputs: Vec<(&str, &mut [f32])> = vec![("logits", &mut stage.logits)];
        for (l, (k, v)) in stage.io.layers.iter().zip(&mut stage.present) {
            outputs.push((&l.present_key, k));
            outputs.push((&l.present_value, v));
        }
        stage
            .graph
            .run(&inputs, &mut outputs)
            .map_err(|e| err(format!("{}: {e}", stage.graph.label())))?;
        // The step's real rows go to rows p.. of the cache; padding's never.
        for ((k, v), (nk, nv)) in self.past.iter_mut().zip(&stage.present) {
            for (past, new) in [(k, nk), (v, nv)] {
                let row = new.len() / n;
                past[p * row..(p + real.len()) * row].copy_from_slice(&new[..real.len() * row]);
            }
        }
        self.past_len += real.len();
        self.tokens.extend_from_slice(real);
        if prefill && self.prefill.is_some() {
            self.steps.0 += 1;
        } else {
            self.steps.1 += 1;
        }
        let stage = match (&self.prefill, prefill) {
            (Some(s), true) => s,
            _ => &self.decode,
        };
        let vocab = stage.io.vocab;
        let last = real.len() - 1;
        Ok(stage.logits[last * vocab..(last + 1) * vocab].to_vec())
    }
}

impl Decoder for HostLoop {
    fn history(&self) -> &[u32] {
        &self.tokens
    }

    fn advance(&mut self, token: u32) -> Result<Option<Vec<f32>>> {
        if self.past_len() >= self.context() {
            eprintln!(
                "note: the graphs' cache of {} rows is full; stopping (export with a larger --context)",
                self.context()
            );
            return Ok(None);
        }
        self.feed(&[token]).map(Some)
    }
}

/// Prompt + generation over the host loop (the cache starts empty), through
/// the loop `engine::generate` runs for eager and compiled steps.
pub fn generate(
    host: &mut HostLoop,
    gen: &mut Generation,
    prompt: &[u32],
    out: &mut dyn FnMut(&str),
    interrupt: &AtomicBool,
) -> Result<GenStats> {
    host.reset();
    let t0 = Instant::now();
    let logits = host.feed(prompt)?;
    let prompt_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let reason = decode_loop(host, logits, gen, out, interrupt)?;
    Ok(GenStats {
        prompt_tokens: prompt.len(),
        prompt_computed: prompt.len(),
        prompt_secs,
        generated: gen.generated().to_vec(),
        gen_secs: t1.elapsed().as_secs_f64(),
        text: gen.text().to_string(),
        reason,
    })
}
