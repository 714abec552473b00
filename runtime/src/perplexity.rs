//! Perplexity and KL divergence over a text, by `llama-perplexity`'s
//! method so the numbers compare (`mllm perplexity`): the text is
//! tokenized once (with the tokenizer's BOS when it adds one), cut into
//! chunks of `ctx` tokens, each chunk's first token replaced by BOS where
//! the model adds one, each chunk run alone against an empty cache, and
//! the second half of each chunk scored: the negative log-likelihood of
//! token `j + 1` under the logits at `j`, for `j` from `ctx / 2` to
//! `ctx - 2`. PPL is `exp` of the mean; its error is `PPL * sqrt(var /
//! (count - 1))` as llama-perplexity prints it.
//!
//! With a base file (`KlBase`) the scored rows' log-probabilities of one
//! model are kept (f16, as llama-perplexity keeps them quantized) and a
//! second model is compared with them: mean KL divergence, how often the
//! top token agrees, and the RMS of the change in the probability of the
//! token that came next.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::rc::Rc;

use mllm_interpreter::KvCache;

use crate::runner::Runner;
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// Running sums of the scored tokens' negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nll {
    pub sum: f64,
    pub sum2: f64,
    pub count: usize,
}

impl Nll {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// PPL so far.
    pub fn ppl(&self) -> f64 {
        (self.sum / self.count.max(1) as f64).exp()
    }

    /// PPL and its standard error, as llama-perplexity's final estimate.
    pub fn estimate(&self) -> (f64, f64) {
        let n = self.count.max(1) as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        let ppl = mean.exp();
        let err = if var > 0.0 && self.count > 1 {
            (var / (n - 1.0)).sqrt() * ppl
        } else {
            0.0
        };
        (ppl, err)
    }
}

/// `log_softmax(logits)` in f64 sums over f32 values (as llama.cpp's).
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_sum = sum.ln() as f32;
    logits.iter().map(|&l| l - max - log_sum).collect()
}

/// The chunks of a text: its tokens, cut into `ctx`-token pieces.
pub struct Chunks {
    pub tokens: Vec<u32>,
    pub ctx: usize,
    pub count: usize,
    /// Replaces each chunk's first token (the model adds a BOS).
    pub bos: Option<u32>,
}

impl Chunks {
    /// Tokenizes `text` and cuts it; fewer than `2 * ctx` tokens is an
    /// error (as llama-perplexity's), naming both numbers.
    pub fn new(
        tok: &Tokenizer,
        text: &str,
        ctx: usize,
        max_chunks: Option<usize>,
    ) -> Result<Chunks> {
        if ctx < 4 {
            return Err(Error::invalid(format!(
                "a context of {ctx} tokens is too small to score (at least 4)"
            )));
        }
        let tokens = tok.encode(text, true)?;
        if tokens.len() < 2 * ctx {
            return Err(Error::invalid(format!("the text has {} tokens; a context of {ctx} needs at least {} (two chunks): give a longer text or a smaller --ctx-size",
                tokens.len(),
                2 * ctx
            )));
        }
        let plain = tok.encode("a", false)?;
        let special = tok.encode("a", true)?;
        let bos = tok
            .bos_id()
            .filter(|&b| special.first() == Some(&b) && plain.first() != Some(&b));
        let all = tokens.len() / ctx;
        Ok(Chunks {
            count: max_chunks.map_or(all, |m| m.min(all)),
            tokens,
            ctx,
            bos,
        })
    }

    /// The ids chunk `i` runs with.
    pub fn ids(&self, i: usize) -> Vec<i32> {
        let mut ids: Vec<i32> = self.tokens[i * self.ctx..(i + 1) * self.ctx]
            .iter()
            .map(|&t| t as i32)
            .collect();
        if let Some(b) = self.bos {
            ids[0] = b as i32;
        }
        ids
    }

    /// The token that follows row `j` of chunk `i`.
    pub fn next(&self, i: usize, j: usize) -> u32 {
        self.tokens[i * self.ctx + j + 1]
    }

    /// The rows of a chunk that are scored.
    pub fn scored(&self) -> std::ops::Range<usize> {
        self.ctx / 2..self.ctx - 1
    }
}

/// The logits of chunk `i`'s scored rows, `[rows, vocab]` row after row,
/// and the vocabulary size.
pub fn chunk_logits(runner: &mut Runner, chunks: &Chunks, i: usize) -> Result<(Vec<f32>, usize)> {
    let cache = Rc::new(RefCell::new(KvCache::new()));
    let logits = runner.step(&cache, &chunks.ids(i), 0, false)?;
    let shape = logits.shape().to_vec();
    if shape.len() != 2 || shape[0] != chunks.ctx {
        return Err(Error::invalid(format!(
            "the model returned logits of shape {shape:?} for {} tokens",
            chunks.ctx
        )));
    }
    let vocab = shape[1];
    let all = logits.to_f32_vec()?;
    let r = chunks.scored();
    Ok((all[r.start * vocab..r.end * vocab].to_vec(), vocab))
}

/// KL statistics against a base model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kld {
    pub sum: f64,
    pub sum2: f64,
    pub same_top: usize,
    /// Sums of the change in the next token's probability, and its square.
    pub dp: f64,
    pub dp2: f64,
    pub count: usize,
}

impl Kld {
    /// Adds one row: the base model's log-probabilities and this one's.
    pub fn add(&mut self, base: &[f32], this: &[f32], next: u32) {
        let mut kl = 0.0f64;
        for (&b, &t) in base.iter().zip(this) {
            let p = (b as f64).exp();
            if p > 0.0 {
                kl += p * (b as f64 - t as f64);
            }
        }
        self.sum += kl;
        self.sum2 += kl * kl;
        let argmax = |v: &[f32]| {
            v.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |m, (i, &x)| if x > m.1 { (i, x) } else { m },
                )
                .0
        };
        self.same_top += usize::from(argmax(base) == argmax(this));
        let n = next as usize;
        if let (Some(&b), Some(&t)) = (base.get(n), this.get(n)) {
            let d = (t as f64).exp() - (b as f64).exp();
            self.dp += d;
            self.dp2 += d * d;
        }
        self.count += 1;
    }

    /// Mean KLD and its standard error.
    pub fn mean(&self) -> (f64, f64) {
        mean_err(self.sum, self.sum2, self.count)
    }

    /// The share of rows whose top token agrees, in [0, 1].
    pub fn same_top(&self) -> f64 {
        self.same_top as f64 / self.count.max(1) as f64
    }

    /// RMS of the change in the next token's probability.
    pub fn rms_dp(&self) -> f64 {
        (self.dp2 / self.count.max(1) as f64).sqrt()
    }
}

fn mean_err(sum: f64, sum2: f64, n: usize) -> (f64, f64) {
    let nf = n.max(1) as f64;
    let mean = sum / nf;
    let var = (sum2 / nf - mean * mean).max(0.0);
    (
        mean,
        if n > 1 {
            (var / (nf - 1.0)).sqrt()
        } else {
            0.0
        },
    )
}

const KL_MAGIC: &[u8; 8] = b"MLLMKLD1";

/// A file of a base model's log-probabilities over a text's scored rows
/// (`--kl-divergence-base`): a header (magic, ctx, vocab, chunks, the
/// chunks' tokens as u32) and then each scored row's log-probabilities as
/// f16, chunk after chunk. All little-endian. Rows are read one at a time
/// (a 50k-token text at ctx 512 makes gigabytes of them).
pub struct KlBase {
    pub ctx: usize,
    pub vocab: usize,
    pub chunks: usize,
    pub tokens: Vec<u32>,
    rows: std::io::BufReader<std::fs::File>,
    path: String,
}

impl KlBase {
    pub fn writer(
        path: &str,
        chunks: &Chunks,
        vocab: usize,
    ) -> Result<std::io::BufWriter<std::fs::File>> {
        let f = std::fs::File::create(path)
            .map_err(|e| Error::invalid(format!("cannot create {path}: {e}")))?;
        let mut w = std::io::BufWriter::new(f);
        let mut head = KL_MAGIC.to_vec();
        for v in [chunks.ctx, vocab, chunks.count] {
            head.extend((v as u32).to_le_bytes());
        }
        for &t in &chunks.tokens[..chunks.count * chunks.ctx] {
            head.extend(t.to_le_bytes());
        }
        w.write_all(&head)
            .map_err(|e| Error::invalid(format!("writing {path}: {e}")))?;
        Ok(w)
    }

    pub fn write_row(w: &mut impl Write, log_probs: &[f32]) -> Result<()> {
        let bytes: Vec<u8> = log_probs
            .iter()
            .flat_map(|&v| half::f16::from_f32(v.max(-65000.0)).to_le_bytes())
            .collect();
        w.write_all(&bytes)
            .map_err(|e| Error::invalid(format!("writing the KL base: {e}")))
    }

    /// Opens a base file: reads its header and tokens, and checks the
    /// file's size against them.
    pub fn read(path: &str) -> Result<KlBase> {
        let io = |e: std::io::Error| Error::invalid(format!("cannot read {path}: {e}"));
        let bad = |why: &str| {
            Error::invalid(format!(
                "{path} is not a KL base written by `mllm perplexity --kl-divergence-base`: {why}"
            ))
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let size = f.metadata().map_err(io)?.len();
        let mut r = std::io::BufReader::new(f);
        let mut head = [0u8; 20];
        r.read_exact(&mut head)
            .map_err(|_| bad("shorter than its header"))?;
        if &head[..8] != KL_MAGIC {
            return Err(bad("wrong magic"));
        }
        let u = |o: usize| {
            u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]) as usize
        };
        let (ctx, vocab, chunks) = (u(8), u(12), u(16));
        let rows_per = (ctx / 2..ctx.saturating_sub(1)).len();
        let n_tokens = ctx.checked_mul(chunks);
        let want = n_tokens
            .and_then(|t| t.checked_mul(4))
            .and_then(|t| {
                rows_per
                    .checked_mul(chunks)?
                    .checked_mul(vocab)?
                    .checked_mul(2)?
                    .checked_add(t)
            })
            .and_then(|b| b.checked_add(20))
            .ok_or_else(|| bad("header overflows"))?;
        if size != want as u64 {
            return Err(bad(&format!("{size} bytes where its header says {want}")));
        }
        let n_tokens = n_tokens.unwrap_or(0);
        let mut raw = vec![0u8; 4 * n_tokens];
        r.read_exact(&mut raw).map_err(io)?;
        let tokens = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(KlBase {
            ctx,
            vocab,
            chunks,
            tokens,
            rows: r,
            path: path.to_string(),
        })
    }

    /// The next row's log-probabilities.
    pub fn next_row(&mut self) -> Result<Vec<f32>> {
        let mut b = vec![0u8; self.vocab * 2];
        self.rows
            .read_exact(&mut b)
            .map_err(|e| Error::invalid(format!("reading {}: {e}", self.path)))?;
        Ok(b.chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_is_llama_perplexitys() {
        let mut n = Nll::default();
        for v in [1.0, 2.0, 3.0, 2.0] {
            n.add(v);
        }
        let (ppl, err) = n.estimate();
        assert!((ppl - 2f64.exp()).abs() < 1e-12);
        // var = 4.5 - 4 = 0.5; sqrt(0.5 / 3) * ppl
        assert!((err - (0.5f64 / 3.0).sqrt() * ppl).abs() < 1e-12);
    }

    #[test]
    fn kld_of_a_distribution_with_itself_is_zero() {
        let lp = log_softmax(&[1.0, 2.0, 0.5, -1.0]);
        let mut k = Kld::default();
        k.add(&lp, &lp, 1);
        assert!(k.mean().0.abs() < 1e-7);
        assert_eq!(k.same_top(), 1.0);
        let other = log_softmax(&[2.0, 1.0, 0.5, -1.0]);
        k.add(&lp, &other, 1);
        assert!(k.mean().0 > 0.0);
        assert_eq!(k.same_top(), 0.5);
        assert!(k.rms_dp() > 0.0);
    }

    #[test]
    fn log_softmax_sums_to_one() {
        let lp = log_softmax(&[3.0, -2.0, 0.25, 7.5]);
        let s: f64 = lp.iter().map(|&v| (v as f64).exp()).sum();
        assert!((s - 1.0).abs() < 1e-6);
    }
}
