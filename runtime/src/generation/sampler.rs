//! Choosing the next token from logits: repetition penalty, then greedy, or
//! top-k -> top-p -> min-p -> temperature -> a seeded draw (llama.cpp's
//! order and flag meanings). The random generator is written out here so a
//! seed gives the same text on every platform and crate version.
//!
//! `SamplerConfig::DEFAULT` is the one table of defaults: the CLI's flags,
//! the server's request fields, the C ABI and the Python package all read
//! it instead of writing the numbers again.

use std::collections::BinaryHeap;

/// Sampling settings; `temperature <= 0` is greedy.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    /// How many recent tokens the repetition penalties look at.
    pub repeat_last_n: usize,
    /// OpenAI's penalties, over the same recent tokens: `presence` is
    /// subtracted from the logit of every token seen, `frequency` once per
    /// time it was seen.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: u64,
}

impl SamplerConfig {
    /// llama.cpp's defaults (the seed is the caller's: see `clock_seed`).
    pub const DEFAULT: SamplerConfig = SamplerConfig {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        seed: 0,
    };
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig::DEFAULT
    }
}

/// A seed from the clock, for callers that were given none (each run then
/// samples differently; pass a seed for repeatable text).
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl SamplerConfig {
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }
}

/// splitmix64: tiny, well-distributed, and stable forever.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
}

/// Index of the largest value (first on ties; NaN never wins; 0 when no
/// value is above -inf).
///
/// Every step of greedy decoding (and every row of a speculative
/// verification) runs this over the whole vocabulary: a plain loop that
/// tracks the index does not vectorize (~1 ns a value, 50 us a row of
/// SmolLM2's 49k, 150 us of Qwen3's 151k), so the maximum is taken in
/// lanes first and its first index found by chunks. `argmax_reference` is
/// its twin.
pub fn argmax(logits: &[f32]) -> usize {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = logits.chunks_exact(LANES);
    for c in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            // `v > m` is false for a NaN `v`: NaN never enters a lane.
            *m = if v > *m { v } else { *m };
        }
    }
    let mut best = f32::NEG_INFINITY;
    for &v in lanes.iter().chain(chunks.remainder()) {
        if v > best {
            best = v;
        }
    }
    if best == f32::NEG_INFINITY {
        return 0;
    }
    // A branch-free test per chunk, then the exact index inside the first
    // chunk that holds the maximum.
    for (k, c) in logits.chunks(LANES * 4).enumerate() {
        if c.iter().fold(false, |hit, &v| hit | (v == best)) {
            let at = c.iter().position(|&v| v == best).unwrap_or(0);
            return k * LANES * 4 + at;
        }
    }
    0
}

/// `argmax`'s twin: the plain loop it must agree with.
pub fn argmax_reference(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best
}

/// The finite logits as (id, logit), highest first (ties: lower id
/// first), the first `top_k` of them (all for 0).
///
/// A full sort of SmolLM2's 49k candidates took 1.2 ms a token (Qwen3's
/// 151k: ~4 ms, a quarter of a 0.6B decode step). Here the best k so far
/// sit in a heap whose worst logit is a floor: a chunk of 64 logits none
/// of which reaches it is passed over by one branch-free test, and the
/// rest are compared by the same total order (logit, then id) a full sort
/// uses, so the list is the full sort's first k (8 us for SmolLM2's row,
/// against 130 us for selecting among all). `candidates_reference` is its
/// twin.
pub fn candidates(logits: &[f32], top_k: usize) -> Vec<(u32, f32)> {
    let finite = |v: f32| v.abs() <= f32::MAX;
    if top_k == 0 || top_k >= logits.len() {
        let mut all: Vec<(u32, f32)> = (0u32..)
            .zip(logits.iter().copied())
            .filter(|&(_, v)| finite(v))
            .collect();
        all.sort_by(by_logit);
        all.truncate(if top_k == 0 { all.len() } else { top_k });
        return all;
    }
    let mut best: BinaryHeap<Ranked> = BinaryHeap::with_capacity(top_k + 1);
    let mut floor = f32::NEG_INFINITY;
    // Logits that rise with the id would each enter the heap (~1 ms for
    // 49k): past this many entries the rest is selected among instead.
    let mut entered = 0;
    for (n, c) in logits.chunks(64).enumerate() {
        if entered > 4096 + 4 * top_k {
            let mut cand: Vec<(u32, f32)> = best.into_iter().map(|Ranked(i, v)| (i, v)).collect();
            cand.extend(
                ((n * 64) as u32..)
                    .zip(logits[n * 64..].iter().copied())
                    .filter(|&(_, v)| finite(v) & (v >= floor)),
            );
            if top_k < cand.len() {
                cand.select_nth_unstable_by(top_k - 1, by_logit);
                cand.truncate(top_k);
            }
            cand.sort_by(by_logit);
            return cand;
        }
        // `>=`: a logit equal to the floor may still rank above the worst
        // kept (a lower id cannot come later, but +0 ranks above -0).
        let reach = |v: f32, floor: f32| finite(v) & (v >= floor);
        if !c.iter().fold(false, |any, &v| any | reach(v, floor)) {
            continue;
        }
        for (id, v) in ((n * 64) as u32..).zip(c.iter().copied()) {
            if !reach(v, floor) {
                continue;
            }
            let e = Ranked(id, v);
            entered += 1;
            if best.len() < top_k {
                best.push(e);
            } else if best.peek().is_some_and(|w| e < *w) {
                best.pop();
                best.push(e);
            } else {
                continue;
            }
            if best.len() == top_k {
                floor = best.peek().map_or(f32::NEG_INFINITY, |w| w.1);
            }
        }
    }
    let mut cand: Vec<(u32, f32)> = best.into_iter().map(|Ranked(i, v)| (i, v)).collect();
    cand.sort_by(by_logit);
    cand
}

/// A candidate ordered by rank: greater is worse, so a max-heap's top is
/// the worst kept.
#[derive(Clone, Copy)]
struct Ranked(u32, f32);

impl PartialEq for Ranked {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        by_logit(&(self.0, self.1), &(o.0, o.1))
    }
}

/// `candidates`' twin: the full sort, then the first `top_k`.
pub fn candidates_reference(logits: &[f32], top_k: usize) -> Vec<(u32, f32)> {
    let mut cand = finite_pairs(logits);
    cand.sort_by(by_logit);
    if top_k > 0 {
        cand.truncate(top_k);
    }
    cand
}

fn finite_pairs(logits: &[f32]) -> Vec<(u32, f32)> {
    logits
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, &v)| (i as u32, v))
        .collect()
}

fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = Rng(config.seed);
        Sampler { config, rng }
    }

    /// Picks the next token. `history` is every token so far (prompt and
    /// generated), for the repetition penalty. Logits holding a NaN or an
    /// infinity are an error, never sampled: they mean a broken model.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32, String> {
        mllm_interpreter::numerics::check_logits(logits)?;
        Ok(self.pick(&mut logits.to_vec(), history))
    }

    /// Picks the next token from logits a processor may have masked: a
    /// masked token is `-inf` and never drawn. The caller has checked the
    /// model's own logits (`sample` does both); `None` when every token is
    /// masked. The penalties are applied to `logits` in place: the decode
    /// loop's row is not copied again.
    pub fn sample_masked(&mut self, logits: &mut [f32], history: &[u32]) -> Option<u32> {
        if !logits.iter().any(|v| v.is_finite()) {
            return None;
        }
        Some(self.pick(logits, history))
    }

    fn pick(&mut self, l: &mut [f32], history: &[u32]) -> u32 {
        let c = &self.config;
        if c.repeat_penalty != 1.0 && c.repeat_penalty > 0.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &t in &history[start..] {
                let t = t as usize;
                if t < l.len() && seen.insert(t) {
                    l[t] = if l[t] > 0.0 {
                        l[t] / c.repeat_penalty
                    } else {
                        l[t] * c.repeat_penalty
                    };
                }
            }
        }
        if c.presence_penalty != 0.0 || c.frequency_penalty != 0.0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut counts = std::collections::HashMap::new();
            for &t in &history[start..] {
                *counts.entry(t as usize).or_insert(0u32) += 1;
            }
            for (t, n) in counts {
                if let Some(v) = l.get_mut(t) {
                    *v -= c.presence_penalty + c.frequency_penalty * n as f32;
                }
            }
        }
        if c.temperature <= 0.0 {
            return argmax(l) as u32;
        }
        let mut cand = candidates(l, c.top_k);
        if cand.is_empty() {
            return argmax(l) as u32;
        }
        let probs = |cand: &[(u32, f32)], temp: f32| -> Vec<f64> {
            let mx = cand[0].1 as f64;
            let e: Vec<f64> = cand
                .iter()
                .map(|(_, v)| ((*v as f64 - mx) / temp as f64).exp())
                .collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(|x| x / s).collect()
        };
        if c.top_p < 1.0 && c.top_p > 0.0 {
            let p = probs(&cand, 1.0);
            let mut acc = 0.0;
            let mut keep = cand.len();
            for (i, pi) in p.iter().enumerate() {
                acc += pi;
                if acc >= c.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if c.min_p > 0.0 {
            let p = probs(&cand, 1.0);
            let floor = p[0] * c.min_p as f64;
            let keep = p.iter().take_while(|&&pi| pi >= floor).count();
            cand.truncate(keep.max(1));
        }
        let p = probs(&cand, c.temperature);
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for (i, pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return cand[i].0;
            }
        }
        cand[cand.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, 0.5, 2.9, -1.0]
    }

    #[test]
    fn non_finite_logits_are_an_error_not_a_token() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for cfg in [SamplerConfig::greedy(), SamplerConfig::default()] {
                let mut s = Sampler::new(cfg);
                let mut l = logits();
                l[3] = bad;
                let err = s.sample(&l, &[]).expect_err("not sampled");
                assert!(err.contains("at token 3"), "{err}");
            }
        }
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&logits(), &[]).expect("finite"), 1);
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        });
        assert_eq!(s.sample(&logits(), &[1]).expect("finite"), 4);
    }

    #[test]
    fn presence_and_frequency_penalties_count_recent_tokens() {
        // Token 1 leads token 4 by 0.1: one sighting with a presence
        // penalty of 0.2 hands the lead to 4; a frequency penalty needs
        // two sightings at 0.06 each.
        let mut s = Sampler::new(SamplerConfig {
            presence_penalty: 0.2,
            ..SamplerConfig::greedy()
        });
        assert_eq!(s.sample(&logits(), &[1]).expect("finite"), 4);
        let mut s = Sampler::new(SamplerConfig {
            frequency_penalty: 0.06,
            ..SamplerConfig::greedy()
        });
        assert_eq!(s.sample(&logits(), &[1]).expect("finite"), 1);
        assert_eq!(s.sample(&logits(), &[1, 1]).expect("finite"), 4);
        // Outside the window of recent tokens nothing counts.
        let mut s = Sampler::new(SamplerConfig {
            presence_penalty: 0.2,
            repeat_last_n: 1,
            ..SamplerConfig::greedy()
        });
        assert_eq!(s.sample(&logits(), &[1, 0]).expect("finite"), 1);
    }

    #[test]
    fn top_k_one_is_greedy_whatever_the_temperature() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            ..Default::default()
        });
        for _ in 0..50 {
            assert_eq!(s.sample(&logits(), &[]).expect("finite"), 1);
        }
    }

    #[test]
    fn same_seed_same_draws_and_draws_follow_the_distribution() {
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
            ..Default::default()
        };
        let draw = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..4000)
                .map(|_| s.sample(&logits(), &[]).expect("finite"))
                .collect::<Vec<u32>>()
        };
        let a = draw(&cfg);
        assert_eq!(a, draw(&cfg));
        assert_ne!(
            a,
            draw(&SamplerConfig {
                seed: 43,
                ..cfg.clone()
            })
        );
        // Empirical frequency of token 1 near its softmax probability.
        let l = logits();
        let z: f64 = l.iter().map(|v| (*v as f64).exp()).sum();
        let p1 = (3.0f64).exp() / z;
        let f1 = a.iter().filter(|&&t| t == 1).count() as f64 / a.len() as f64;
        assert!((f1 - p1).abs() < 0.03, "freq {f1} vs p {p1}");
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        for cfg in [
            SamplerConfig {
                temperature: 1.0,
                top_k: 0,
                top_p: 0.5,
                min_p: 0.0,
                seed: 1,
                ..Default::default()
            },
            SamplerConfig {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.5,
                seed: 1,
                ..Default::default()
            },
        ] {
            let mut s = Sampler::new(cfg);
            for _ in 0..500 {
                let t = s.sample(&logits(), &[]).expect("finite");
                assert!(t == 1 || t == 4, "drew {t}");
            }
        }
    }
}
