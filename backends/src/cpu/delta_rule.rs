//! `Op::GatedDeltaRule`: the recurrence of Gated DeltaNet (Qwen3.5's linear
//! attention layers). Per value head, with the state `S [dk, dv]`:
//!
//! ```text
//! S = S * exp(g_t)
//! S = S + k_t ⊗ (beta_t * (v_t - k_t^T S))
//! o_t = q_t^T S
//! ```
//!
//! `recurrent_ref` is that definition, token by token (the reference twin,
//! and the decode path: one token is one step). A prefill runs the chunked
//! form of transformers' `torch_chunk_gated_delta_rule` (the WY / UT
//! transform): within a chunk of `CHUNK` tokens the corrections `v_new`
//! solve one unit lower-triangular system by forward substitution, so the
//! state is read and written once per chunk instead of once per token.
//! Heads are independent and run in parallel.
//!
//! Those scalar forms are the reference twins; `delta_simd` holds the
//! vectorised ones that run where the CPU has them.

use std::cell::RefCell;

use rayon::prelude::*;

use super::delta_simd::{self, Path, Scratch};
use super::qlinear::SendPtr;

/// Tokens per chunk of the chunked form (transformers uses 64).
pub const CHUNK: usize = 64;

/// Calls of at least this many tokens take the chunked form; fewer (decode,
/// a speculative verification step) the recurrent one, which gives each
/// token exactly the bits a one-token step gives it (the chunked form's
/// sums depend on the chunk): steps up to `ROW_INVARIANT_STEP` rows stay
/// row-invariant.
pub const CHUNKED_FROM: usize = super::ROW_INVARIANT_STEP + 1;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Sizes of one call: `t` tokens, `hk` query/key heads of `dk`, `hv` value
/// heads of `dv` (`hv` a multiple of `hk`: value head `h` reads key head
/// `h / (hv / hk)`, as `repeat_interleave` does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub t: usize,
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
}

/// The inputs, f32, in the op's layouts: `q`, `k` `[t, hk, dk]`, `v`
/// `[t, hv, dv]`, `g`, `beta` `[t, hv]`, `state` `[hv, dk, dv]`.
pub struct Inputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
    pub state: &'a [f32],
}

impl Dims {
    fn key_head(&self, h: usize) -> usize {
        h / (self.hv / self.hk)
    }
    pub(super) fn qk(&self, i: usize, h: usize) -> std::ops::Range<usize> {
        let at = (i * self.hk + self.key_head(h)) * self.dk;
        at..at + self.dk
    }
    pub(super) fn vrow(&self, i: usize, h: usize) -> std::ops::Range<usize> {
        let at = (i * self.hv + h) * self.dv;
        at..at + self.dv
    }
    /// Length of the packed result: outputs then final states.
    pub fn packed_len(&self) -> usize {
        self.t * self.hv * self.dv + self.hv * self.dk * self.dv
    }
}

/// The packed result `[t * hv * dv (outputs [t, hv, dv]) ++ hv * dk * dv
/// (final state [hv, dk, dv])]`: the recurrent form for a few tokens, the
/// chunked one otherwise; vectorised where the CPU allows.
pub fn gated_delta_rule(d: Dims, x: &Inputs) -> Vec<f32> {
    match delta_simd::best() {
        Some(p) => gated_delta_rule_on(p, d, x, CHUNK),
        None => gated_delta_rule_scalar(d, x),
    }
}

/// `gated_delta_rule` on path `p` (which this CPU must run: one of
/// `delta_simd::paths()`) with chunks of `chunk` tokens. Heads run on the
/// pool and write their parts of the result in place: no per-head
/// buffers to pack, and the state is copied once.
pub fn gated_delta_rule_on(p: Path, d: Dims, x: &Inputs, chunk: usize) -> Vec<f32> {
    assert!(delta_simd::paths().contains(&p), "{p:?} is not available");
    // Every element is written by exactly one head (its output columns
    // of every row, its state block), so the result is not zeroed first:
    // a memset of the ~1 MiB result was 2% of a decode step.
    let n = d.packed_len();
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let base = SendPtr(out.as_mut_ptr());
    let task = |h: usize| {
        SCRATCH.with_borrow_mut(|sc| {
            // SAFETY: `p` is available (asserted); head `h` writes only
            // its own output columns and state block, inside `out`.
            unsafe { delta_simd::head(p, d, x, h, chunk, base.get(), sc) }
        })
    };
    // Below ~16k state elements a step is a few microseconds: not worth
    // waking the pool.
    if d.hv * d.dk * d.dv >= 1 << 14 {
        super::pool::for_each(d.hv, task);
    } else {
        (0..d.hv).for_each(task);
    }
    // SAFETY: the heads wrote all `n` values (see above).
    unsafe { out.set_len(n) };
    out
}

/// The scalar forms with heads on rayon (CPUs without a vector path).
pub fn gated_delta_rule_scalar(d: Dims, x: &Inputs) -> Vec<f32> {
    let per_head: Vec<(Vec<f32>, Vec<f32>)> = (0..d.hv)
        .into_par_iter()
        .map(|h| {
            if d.t < CHUNKED_FROM {
                head_recurrent(d, x, h)
            } else {
                head_chunked(d, x, h, CHUNK)
            }
        })
        .collect();
    pack(d, per_head)
}

/// The reference twin: the recurrence, token by token.
pub fn recurrent_ref(d: Dims, x: &Inputs) -> Vec<f32> {
    pack(d, (0..d.hv).map(|h| head_recurrent(d, x, h)).collect())
}

/// The chunked form with chunks of `chunk` tokens (tests vary it).
pub fn chunked(d: Dims, x: &Inputs, chunk: usize) -> Vec<f32> {
    pack(d, (0..d.hv).map(|h| head_chunked(d, x, h, chunk)).collect())
}

fn pack(d: Dims, per_head: Vec<(Vec<f32>, Vec<f32>)>) -> Vec<f32> {
    let mut out = vec![0.0f32; d.packed_len()];
    let states_at = d.t * d.hv * d.dv;
    for (h, (o, s)) in per_head.into_iter().enumerate() {
        for i in 0..d.t {
            out[d.vrow(i, h)].copy_from_slice(&o[i * d.dv..(i + 1) * d.dv]);
        }
        let at = states_at + h * d.dk * d.dv;
        out[at..at + d.dk * d.dv].copy_from_slice(&s);
    }
    out
}

/// Head `h`: outputs `[t, dv]` and final state `[dk, dv]`, token by token.
fn head_recurrent(d: Dims, x: &Inputs, h: usize) -> (Vec<f32>, Vec<f32>) {
    let (dk, dv) = (d.dk, d.dv);
    let mut s = x.state[h * dk * dv..(h + 1) * dk * dv].to_vec();
    let mut out = vec![0.0f32; d.t * dv];
    let mut delta = vec![0.0f32; dv];
    for i in 0..d.t {
        let (q, k, v) = (&x.q[d.qk(i, h)], &x.k[d.qk(i, h)], &x.v[d.vrow(i, h)]);
        let decay = x.g[i * d.hv + h].exp();
        let beta = x.beta[i * d.hv + h];
        s.iter_mut().for_each(|e| *e *= decay);
        // delta = beta * (v - k^T S)
        delta.copy_from_slice(v);
        for (a, row) in k.iter().zip(s.chunks(dv)) {
            delta.iter_mut().zip(row).for_each(|(dl, r)| *dl -= a * r);
        }
        delta.iter_mut().for_each(|e| *e *= beta);
        for (a, row) in k.iter().zip(s.chunks_mut(dv)) {
            row.iter_mut().zip(&delta).for_each(|(r, dl)| *r += a * dl);
        }
        let o = &mut out[i * dv..(i + 1) * dv];
        for (a, row) in q.iter().zip(s.chunks(dv)) {
            o.iter_mut().zip(row).for_each(|(e, r)| *e += a * r);
        }
    }
    (out, s)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Head `h` by chunks of `chunk` tokens (the last may be shorter: no
/// padding is needed when each chunk's length is its own).
fn head_chunked(d: Dims, x: &Inputs, h: usize, chunk: usize) -> (Vec<f32>, Vec<f32>) {
    let (dk, dv) = (d.dk, d.dv);
    let chunk = chunk.max(1);
    let mut s = x.state[h * dk * dv..(h + 1) * dk * dv].to_vec();
    let mut out = vec![0.0f32; d.t * dv];
    let mut cum = Vec::with_capacity(chunk);
    let mut vn = vec![0.0f32; chunk * dv];
    let mut kk = vec![0.0f32; chunk * chunk];
    let mut start = 0;
    while start < d.t {
        let l = chunk.min(d.t - start);
        let key = |j: usize| &x.k[d.qk(start + j, h)];
        let query = |j: usize| &x.q[d.qk(start + j, h)];
        // cum[i]: log of the decay from the chunk's start through token i.
        cum.clear();
        let mut acc = 0.0f32;
        for j in 0..l {
            acc += x.g[(start + j) * d.hv + h];
            cum.push(acc);
        }
        // kk[i][j] = k_i . k_j for j <= i (the UT system and, with q, the
        // intra-chunk scores use them).
        for i in 0..l {
            for j in 0..=i {
                kk[i * chunk + j] = dot(key(i), key(j));
            }
        }
        // The correction each token writes, vn_i = beta_i * (v_i -
        // exp(cum_i) k_i^T S - sum_{j<i} (k_i.k_j) exp(cum_i - cum_j) vn_j):
        // the unit lower-triangular system of the UT transform, solved by
        // forward substitution.
        for i in 0..l {
            let beta = x.beta[(start + i) * d.hv + h];
            let e = cum[i].exp();
            let (done, rest) = vn.split_at_mut(i * dv);
            let row = &mut rest[..dv];
            row.copy_from_slice(&x.v[d.vrow(start + i, h)]);
            for (a, srow) in key(i).iter().zip(s.chunks(dv)) {
                let a = a * e;
                row.iter_mut().zip(srow).for_each(|(r, sv)| *r -= a * sv);
            }
            for j in 0..i {
                let c = kk[i * chunk + j] * (cum[i] - cum[j]).exp();
                let prev = &done[j * dv..(j + 1) * dv];
                row.iter_mut().zip(prev).for_each(|(r, p)| *r -= c * p);
            }
            row.iter_mut().for_each(|r| *r *= beta);
        }
        // o_i = exp(cum_i) q_i^T S + sum_{j<=i} (q_i.k_j) exp(cum_i - cum_j) vn_j
        for i in 0..l {
            let o = &mut out[(start + i) * dv..(start + i + 1) * dv];
            let e = cum[i].exp();
            for (a, srow) in query(i).iter().zip(s.chunks(dv)) {
                let a = a * e;
                o.iter_mut().zip(srow).for_each(|(r, sv)| *r += a * sv);
            }
            for j in 0..=i {
                let c = dot(query(i), key(j)) * (cum[i] - cum[j]).exp();
                let vj = &vn[j * dv..(j + 1) * dv];
                o.iter_mut().zip(vj).for_each(|(r, p)| *r += c * p);
            }
        }
        // S = exp(cum_last) S + sum_j exp(cum_last - cum_j) k_j ⊗ vn_j
        let last = cum[l - 1];
        let el = last.exp();
        s.iter_mut().for_each(|e| *e *= el);
        for j in 0..l {
            let w = (last - cum[j]).exp();
            let vj = &vn[j * dv..(j + 1) * dv];
            for (a, srow) in key(j).iter().zip(s.chunks_mut(dv)) {
                let a = a * w;
                srow.iter_mut().zip(vj).for_each(|(r, p)| *r += a * p);
            }
        }
        start += l;
    }
    (out, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::testutil::{assert_close, vec_f32};
    use proptest::prelude::*;

    /// Inputs as the model makes them: q, k of unit length (l2-normalized),
    /// g in [-2, 0] (log decays), beta in (0, 1).
    struct Case {
        d: Dims,
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        g: Vec<f32>,
        beta: Vec<f32>,
        state: Vec<f32>,
    }

    fn unit_rows(mut x: Vec<f32>, n: usize) -> Vec<f32> {
        for r in x.chunks_mut(n) {
            let norm = r.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-3);
            r.iter_mut().for_each(|a| *a /= norm);
        }
        x
    }

    fn case(d: Dims, seed: u64) -> Case {
        let Dims { t, hk, hv, dk, dv } = d;
        Case {
            d,
            q: unit_rows(vec_f32(seed, t * hk * dk), dk),
            k: unit_rows(vec_f32(seed ^ 1, t * hk * dk), dk),
            v: vec_f32(seed ^ 2, t * hv * dv),
            g: vec_f32(seed ^ 3, t * hv)
                .iter()
                .map(|a| -(a.abs()))
                .collect(),
            beta: vec_f32(seed ^ 4, t * hv)
                .iter()
                .map(|a| a.abs() / 2.0)
                .collect(),
            state: vec_f32(seed ^ 5, hv * dk * dv),
        }
    }

    impl Case {
        fn inputs(&self) -> Inputs<'_> {
            Inputs {
                q: &self.q,
                k: &self.k,
                v: &self.v,
                g: &self.g,
                beta: &self.beta,
                state: &self.state,
            }
        }
        /// Tokens `a..b` with `state` as the initial state.
        fn part(&self, a: usize, b: usize, state: &[f32]) -> Vec<f32> {
            let d = self.d;
            let (qk, vv, gh) = (d.hk * d.dk, d.hv * d.dv, d.hv);
            let x = Inputs {
                q: &self.q[a * qk..b * qk],
                k: &self.k[a * qk..b * qk],
                v: &self.v[a * vv..b * vv],
                g: &self.g[a * gh..b * gh],
                beta: &self.beta[a * gh..b * gh],
                state,
            };
            gated_delta_rule(Dims { t: b - a, ..d }, &x)
        }
    }

    #[test]
    fn one_token_one_head_by_hand() {
        // S = 0: delta = beta * v, S = k ⊗ delta, o = (q.k) delta.
        let d = Dims {
            t: 1,
            hk: 1,
            hv: 1,
            dk: 2,
            dv: 1,
        };
        let x = Inputs {
            q: &[1.0, 0.0],
            k: &[0.6, 0.8],
            v: &[2.0],
            g: &[0.0],
            beta: &[0.5],
            state: &[0.0, 0.0],
        };
        let y = recurrent_ref(d, &x);
        assert_close(&y, &[0.6, 0.6, 0.8], 1e-6).expect("by hand");
        assert_close(&chunked(d, &x, 64), &y, 1e-6).expect("chunked");
    }

    /// Qwen3.5-0.8B's head sizes (128 x 128, 16 lanes by 4 vectors plus
    /// none left over) on the pool: a decode step, a few tokens, and a
    /// prefill of one full chunk and a short one.
    #[test]
    fn model_sized_heads_on_the_pool() {
        for t in [1, 3, 70] {
            let c = case(
                Dims {
                    t,
                    hk: 2,
                    hv: 4,
                    dk: 128,
                    dv: 128,
                },
                t as u64,
            );
            let want = recurrent_ref(c.d, &c.inputs());
            for p in delta_simd::paths() {
                let got = gated_delta_rule_on(p, c.d, &c.inputs(), CHUNK);
                assert_close(&got, &want, 5e-4).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Chunked == recurrent over odd sizes, chunk sizes that divide t,
        /// do not, exceed it and are 1; grouped heads (hv = r * hk).
        #[test]
        fn chunked_matches_recurrent(
            t in 1usize..72,
            hk in 1usize..3,
            rep in 1usize..4,
            dk in 1usize..10,
            dv in 1usize..10,
            chunk in 1usize..20,
            seed in any::<u64>(),
        ) {
            let c = case(Dims { t, hk, hv: hk * rep, dk, dv }, seed);
            let want = recurrent_ref(c.d, &c.inputs());
            assert_close(&chunked(c.d, &c.inputs(), chunk), &want, 2e-4)?;
            assert_close(&gated_delta_rule(c.d, &c.inputs()), &want, 2e-4)?;
        }

        /// Every vector path == the recurrent twin: both forms (t below
        /// and from CHUNKED_FROM), widths around the vector lengths (4,
        /// 8, 16 lanes; 4-vector blocks up to 64 columns plus tails), odd
        /// chunk sizes, grouped heads; decays up to 1 per token, or up to
        /// 90, whose products within a chunk go subnormal (the paths flush
        /// them, `denormals`; the twin does not).
        #[test]
        fn vector_paths_match_recurrent(
            t in 1usize..72,
            hk in 1usize..3,
            rep in 1usize..3,
            dk in 1usize..70,
            dv in 1usize..140,
            chunk in 1usize..20,
            strong in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let mut c = case(Dims { t, hk, hv: hk * rep, dk, dv }, seed);
            if strong {
                c.g.iter_mut().for_each(|g| *g *= 90.0);
            }
            let want = recurrent_ref(c.d, &c.inputs());
            for p in delta_simd::paths() {
                assert_close(&gated_delta_rule_on(p, c.d, &c.inputs(), chunk), &want, 5e-4)?;
            }
        }

        /// Two calls, the first's final state carried into the second,
        /// equal one call over the concatenation (prefill + decode, and
        /// prefill in two chunks); a split at 0 is a call of no tokens.
        #[test]
        fn state_carries_across_calls(
            t in 1usize..80,
            split in 0usize..80,
            dk in 1usize..9,
            dv in 1usize..9,
            seed in any::<u64>(),
        ) {
            let d = Dims { t, hk: 1, hv: 2, dk, dv };
            let c = case(d, seed);
            let whole = gated_delta_rule(d, &c.inputs());
            let s = split.min(t);
            let first = c.part(0, s, &c.state);
            let second = c.part(s, t, &first[s * d.hv * dv..]);
            let mut joined = first[..s * d.hv * dv].to_vec();
            joined.extend_from_slice(&second);
            assert_close(&joined, &whole, 2e-4)?;
        }
    }
}
