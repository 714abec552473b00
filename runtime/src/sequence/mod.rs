//! One sequence's state: its KV cache and the tokens the cache holds. A
//! model (`Runner`) serves any number of sequences: `Engine` pairs one of
//! each for the commands, the server keeps one per slot. Prefix reuse lives
//! here: feeding ids computes only what follows the longest prefix the
//! cache already holds.

use std::cell::RefCell;
use std::rc::Rc;

use mllm_backends::kv::KvPage;
use mllm_backends::DType;
use mllm_interpreter::KvCache;

use crate::hidden_rows::HiddenRows;
use crate::images::{ImageTokens, Images};

mod batch;
mod rewind;

use crate::runner::{Runner, PREFILL_CHUNK};
use crate::{Error, Result};
pub use rewind::Checkpoint;
use rewind::StepStates;

pub struct Sequence {
    cache: Rc<RefCell<KvCache>>,
    /// The tokens whose keys and values the cache holds, in order.
    pub cached: Vec<u32>,
    /// How many ids the last feed actually computed (the rest were cached).
    pub last_computed: usize,
    /// Model steps (of any number of rows) run on this sequence since it
    /// was made: what a draft's batched lookup saves shows here.
    pub steps: usize,
    /// Rotary position of token `i` is `i + pos_offset`: 0 for text, the
    /// rope delta after a prompt with images.
    pos_offset: i64,
    /// Whether the cache holds a prompt with images.
    has_images: bool,
    /// What identifies those images (the caller's hash of their pixels);
    /// a later prompt reuses the cache past them only with the same key.
    image_key: Option<u64>,
    /// With images: where their placeholders lie in `cached`, the first
    /// and one past the last. Positions before the first are plain text
    /// (shareable with any prompt); past the last, with prompts of the same
    /// images. Tiled images (1-D positions): (0, usize::MAX), nothing
    /// (their own next turn still continues the cache).
    image_span: (usize, usize),
    /// Length of the prompt last fed through `rewind_for_continuation` or
    /// `feed_images` (0: none), which a next turn must begin with.
    prompt_len: usize,
    /// What the cache stores (f32 unless `set_kv_dtype`).
    kv_dtype: DType,
    /// The model's context length, when its config says.
    pub max_context: Option<usize>,
    /// Leading positions computed from an empty cache by steps of at most
    /// `PREFILL_CHUNK` tokens that each began at a multiple of it (a
    /// prompt computed in chunks, as the server and `mllm run` do), or by
    /// any steps where `any_cut`: whole chunks of them (all of them where
    /// `any_cut`) have exactly the bits any prompt starting with the same
    /// tokens gets, so they can be shared (`shareable`).
    aligned: usize,
    /// Whether the steps ran where rows do not depend on the step's size
    /// (`Runner::chunk_invariant`): a prefix is then shareable at any
    /// length.
    any_cut: bool,
    /// The final hidden states of the cached positions, where a proposer
    /// reads them (`keep_hidden`; the runner must keep side outputs too).
    pub hidden: Option<HiddenRows>,
    /// Whether multi-row steps keep each row's recurrent states
    /// (`keep_step_states`).
    keeps_states: bool,
    step_states: Option<StepStates>,
}

impl Sequence {
    pub fn new(max_context: Option<usize>) -> Sequence {
        Sequence {
            cache: Rc::new(RefCell::new(KvCache::new())),
            cached: vec![],
            last_computed: 0,
            steps: 0,
            pos_offset: 0,
            has_images: false,
            image_key: None,
            image_span: (0, 0),
            prompt_len: 0,
            kv_dtype: DType::F32,
            max_context,
            aligned: 0,
            any_cut: false,
            hidden: None,
            keeps_states: false,
            step_states: None,
        }
    }

    /// Stores keys and values as `dtype` (f32, f16, q8_0) from now on; the
    /// sequence starts over.
    pub fn set_kv_dtype(&mut self, dtype: DType) -> Result<()> {
        KvCache::with_dtype(dtype).map_err(|e| Error::generate(e.to_string()))?;
        self.kv_dtype = dtype;
        self.reset();
        Ok(())
    }

    /// Bytes the KV cache holds now.
    pub fn kv_bytes(&self) -> usize {
        self.cache.borrow().bytes()
    }

    /// Forgets everything: an empty cache.
    pub fn reset(&mut self) {
        let cache = KvCache::with_dtype(self.kv_dtype).unwrap_or_default();
        self.cache = Rc::new(RefCell::new(cache));
        self.cached.clear();
        self.pos_offset = 0;
        self.has_images = false;
        self.image_key = None;
        self.image_span = (0, 0);
        self.prompt_len = 0;
        self.aligned = 0;
        self.step_states = None;
        if let Some(h) = self.hidden.as_mut() {
            h.clear();
        }
    }

    pub fn check_context(&self, tokens: usize) -> Result<()> {
        match self.max_context {
            Some(max) if tokens > max => Err(Error::generate(format!("the conversation needs {tokens} tokens but the model's context is {max} tokens; shorten the prompt or start a new chat"
            ))),
            _ => Ok(()),
        }
    }

    /// How many leading ids of `ids` the cache holds already (for a text
    /// prompt; a cache holding images is not reusable by text ids).
    pub fn reusable(&self, ids: &[u32]) -> usize {
        if self.has_images {
            return 0;
        }
        common_prefix(&self.cached, ids)
    }

    /// How many leading ids of `ids` the cache can keep when `ids` is the
    /// next turn of the conversation the cache holds: `ids` must begin with
    /// the whole prompt last fed (its answer may re-tokenize differently, so
    /// the match may end inside it), else 0. Other prompts share only
    /// through `shareable`, which keeps a request's numbers independent of
    /// what ran before it (where steps are not chunk-invariant, only
    /// whole chunks computed from an empty cache are).
    pub fn continuation(&self, ids: &[u32]) -> usize {
        if self.prompt_len == 0 || ids.len() <= self.prompt_len {
            return 0;
        }
        let common = common_prefix(&self.cached, ids);
        if common < self.prompt_len {
            return 0;
        }
        common.min(ids.len() - 1)
    }

    /// How many leading ids of `ids` this cache can give another prompt
    /// (or a later one in the same slot) without changing a bit of its
    /// answer: the positions computed from an empty cache (see `aligned`;
    /// whole prompt chunks of them where steps are not chunk-invariant),
    /// leaving at least one id to compute.
    pub fn shareable(&self, ids: &[u32]) -> usize {
        self.shareable_with(ids, None)
    }

    /// `shareable` for a prompt with the images `key` identifies (`None`:
    /// a text prompt): a cache holding images gives the text before them
    /// to any prompt, and past them only to a prompt with the same images
    /// whose ids hold all of their placeholders in the shared part.
    pub fn shareable_with(&self, ids: &[u32], key: Option<u64>) -> usize {
        if ids.is_empty() {
            return 0;
        }
        let mut n = common_prefix(&self.cached, ids)
            .min(self.aligned)
            .min(ids.len() - 1);
        if self.has_images {
            let same = key.is_some() && key == self.image_key;
            if !(same && n >= self.image_span.1) {
                n = n.min(self.image_span.0);
            }
        }
        self.whole(n)
    }

    /// `n` shareable positions: all of them where any cut gives the same
    /// bits, else whole chunks.
    fn whole(&self, n: usize) -> usize {
        if self.any_cut {
            n
        } else {
            n - n % PREFILL_CHUNK
        }
    }

    /// Notes that `n` positions from `start` were computed by `runner` in
    /// one step (see `aligned`).
    fn computed(&mut self, runner: &Runner, start: usize, n: usize) {
        self.steps += 1;
        // Recurrent layers (Gated DeltaNet) compute a chunk with sums that
        // depend on its length.
        self.any_cut = runner.chunk_invariant() && !self.has_state();
        let chunked = start.is_multiple_of(PREFILL_CHUNK) && n <= PREFILL_CHUNK;
        if start == self.aligned && (self.any_cut || (chunked && !self.has_images)) {
            self.aligned = start + n;
        }
    }

    /// The leading positions this cache can give any prompt that begins
    /// with them: `aligned`, in whole chunks where steps are not
    /// chunk-invariant (none with images).
    pub fn shareable_len(&self) -> usize {
        let n = self.aligned.min(self.cached.len());
        if self.has_images {
            // What any prompt can take (the prefix store keeps text).
            return self.whole(n.min(self.image_span.0));
        }
        self.whole(n)
    }

    /// Whether the cache can give all of `prefix` (`shareable_len`
    /// positions at least, holding those ids).
    pub fn holds(&self, prefix: &[u32]) -> bool {
        prefix.len() <= self.shareable_len() && self.cached.starts_with(prefix)
    }

    /// Whether any cut of the prompt into steps gives the same bits (see
    /// `any_cut`): its shareable positions need not be whole chunks.
    pub fn any_cut(&self) -> bool {
        self.any_cut
    }

    /// A copy of positions `[start, end)` of every layer, `end` within
    /// `shareable_len` (a server's prefix store keeps prefixes as pages);
    /// `None` past that or where the cache cannot be cut (in device memory,
    /// with a recurrent state).
    pub fn kv_page(&self, start: usize, end: usize) -> Option<KvPage> {
        if end > self.shareable_len() {
            return None;
        }
        self.cache.borrow().page(start, end)
    }

    /// Starts over from `pages` (`kv_page`s of other sequences, laid end to
    /// end) holding the text prefix `ids`, computed where any cut gives the
    /// same bits or not (`any_cut`). False (nothing changed) where the pages
    /// do not hold `ids.len()` positions of this sequence's cache type.
    pub fn adopt_pages(&mut self, ids: &[u32], pages: &[&KvPage], any_cut: bool) -> bool {
        if ids.is_empty() || pages.iter().any(|p| p.dtype() != self.kv_dtype) {
            return false;
        }
        let Some(cache) = KvCache::from_pages(pages, ids.len()) else {
            return false;
        };
        self.reset();
        self.cache = Rc::new(RefCell::new(cache));
        self.cached = ids.to_vec();
        self.aligned = ids.len();
        self.any_cut = any_cut;
        true
    }

    /// Starts over from a copy of the first `n` positions of `donor`'s
    /// cache (`donor.shareable` of the prompt that follows, at most):
    /// another slot's computed prefix instead of computing it again. False
    /// (nothing changed) where that cache cannot be copied: in device
    /// memory, with a recurrent state, or not `n` shareable positions.
    pub fn adopt_prefix(&mut self, donor: &Sequence, n: usize) -> bool {
        // From a cache with images: the text before them, or all of them.
        let images = donor.has_images && n > donor.image_span.0;
        if n == 0
            || (images && (n < donor.image_span.1 || !donor.any_cut))
            || n > donor.aligned.min(donor.cached.len())
            || donor.kv_dtype != self.kv_dtype
        {
            return false;
        }
        let Some(cache) = donor.cache.borrow().share_prefix(n) else {
            return false;
        };
        self.reset();
        self.cache = Rc::new(RefCell::new(cache));
        self.cached = donor.cached[..n].to_vec();
        self.aligned = n;
        self.any_cut = donor.any_cut;
        if images {
            self.has_images = true;
            self.image_key = donor.image_key;
            self.image_span = donor.image_span;
            self.pos_offset = donor.pos_offset;
        }
        true
    }

    /// `rewind_to` for a server's text prompt: keeps what `continuation`
    /// or `shareable` allows, else starts afresh.
    pub fn rewind_for_continuation(&mut self, ids: &[u32]) -> Result<usize> {
        if ids.is_empty() {
            return Err(Error::generate("empty prompt"));
        }
        self.check_context(ids.len())?;
        let keep = if self.has_images {
            // The text before the images, where shareable.
            self.shareable(ids)
        } else {
            self.continuation(ids).max(self.shareable(ids))
        };
        // A recurrent layer's state cannot be rewound: truncating below it
        // empties the cache (truncate keeps 0), and the prompt starts over.
        let keep = if keep == 0 { 0 } else { self.keep(keep) };
        if keep == 0 {
            self.reset();
        }
        self.prompt_len = ids.len();
        Ok(keep)
    }

    /// Keeps the longest prefix of `ids` the cache holds (at least one id
    /// is left to compute, since its logits are needed) and returns where
    /// computing resumes; follow with `extend` on `ids[start..]`.
    pub fn rewind_to(&mut self, ids: &[u32]) -> Result<usize> {
        if ids.is_empty() {
            return Err(Error::generate("empty prompt"));
        }
        self.check_context(ids.len())?;
        if self.has_images {
            // Text ids cannot reproduce a prompt with images: start over.
            self.reset();
        }
        let common = self.reusable(ids).min(ids.len() - 1);
        Ok(self.keep(common))
    }

    /// Keeps the first `n` cached positions and returns how many the cache
    /// kept: `n`, or 0 (everything forgotten) when a recurrent layer's
    /// state would have to be rewound, which it cannot be.
    fn keep(&mut self, n: usize) -> usize {
        let kept = self.cache.borrow_mut().truncate(n);
        if kept < n {
            self.reset();
            return 0;
        }
        self.cached.truncate(kept);
        self.aligned = self.aligned.min(kept);
        self.step_states = None;
        if let Some(h) = self.hidden.as_mut() {
            h.truncate(kept);
        }
        if self.has_images && kept <= self.image_span.0 {
            // Only text before the images is left.
            self.has_images = false;
            self.image_key = None;
            self.image_span = (0, 0);
            self.pos_offset = 0;
            self.prompt_len = self.prompt_len.min(kept);
        }
        kept
    }

    /// Computes `ids` after what the cache holds; returns the logits after
    /// the last one.
    pub fn extend(&mut self, runner: &mut Runner, ids: &[u32]) -> Result<Vec<f32>> {
        let start = self.cached.len();
        self.check_context(start + ids.len())?;
        let ids32: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        let pos = usize::try_from(start as i64 + self.pos_offset)
            .map_err(|_| Error::generate("a negative rotary position"))?;
        let t = runner.step(&self.cache, &ids32, pos, true)?;
        self.collect_side(runner, start, ids.len(), false)?;
        self.computed(runner, start, ids.len());
        self.cached.extend_from_slice(ids);
        let rows = t.shape()[0];
        Ok(t.narrow0(rows - 1, rows)?.to_f32_vec()?)
    }

    /// Computes `ids` after what the cache holds in one step; returns the
    /// logits after each of them (`ids.len()` rows). Each row has exactly
    /// the bits one-token steps would give it (the kernels are
    /// row-invariant up to `mllm_backends::cpu::ROW_INVARIANT_STEP` rows on
    /// the CPU), which is what lets speculative decoding verify proposed
    /// tokens in one step.
    pub fn extend_rows(&mut self, runner: &mut Runner, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let start = self.cached.len();
        self.check_context(start + ids.len())?;
        let ids32: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        let pos = usize::try_from(start as i64 + self.pos_offset)
            .map_err(|_| Error::generate("a negative rotary position"))?;
        // One row: the decode step's own graph (every row is the last).
        let t = runner.step(&self.cache, &ids32, pos, ids.len() == 1)?;
        self.collect_side(runner, start, ids.len(), true)?;
        self.computed(runner, start, ids.len());
        self.cached.extend_from_slice(ids);
        let flat = t.to_f32_vec()?;
        let rows = t.shape()[0];
        if rows != ids.len() || flat.len() % rows.max(1) != 0 {
            return Err(Error::generate(format!(
                "a step of {} tokens returned {rows} rows of logits",
                ids.len()
            )));
        }
        let vocab = flat.len() / rows;
        Ok(flat.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Forgets every cached position from `n` on (the tokens a verification
    /// step computed past the last accepted one). An error where a
    /// recurrent layer's state would have to be rewound, which it cannot be
    /// (the cache is then empty).
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n >= self.cached.len() {
            return Ok(());
        }
        if self.keep(n) != n {
            return Err(Error::generate(
                "this model's recurrent layers cannot be rewound, so proposed tokens cannot be taken back (speculative decoding needs attention-only models for now)",
            ));
        }
        Ok(())
    }

    /// Whether the cache holds a recurrent layer's state (which `truncate`
    /// cannot rewind; `checkpoint` and `restore` can).
    pub fn has_state(&self) -> bool {
        self.cache.borrow().has_state()
    }

    /// Makes the cache hold exactly `ids`, reusing the longest prefix it
    /// already holds, and returns the logits after the last id.
    pub fn feed(&mut self, runner: &mut Runner, ids: &[u32]) -> Result<Vec<f32>> {
        let start = self.rewind_to(ids)?;
        let logits = self.extend(runner, &ids[start..])?;
        self.last_computed = ids.len() - start;
        Ok(logits)
    }

    /// Appends one token and returns the logits after it.
    pub fn step(&mut self, runner: &mut Runner, token: u32) -> Result<Vec<f32>> {
        self.extend(runner, &[token])
    }

    /// Computes a prompt with images (ids hold each image's placeholder
    /// tokens) and returns the logits after the last id; later steps
    /// continue at the rope positions the images left. With `key` (what
    /// identifies the images), a prompt that continues the cached one
    /// (its next turn, with the same images) computes only the new part.
    pub fn feed_images(
        &mut self,
        runner: &mut Runner,
        ids: &[u32],
        images: &Images,
        spec: &ImageTokens,
        key: Option<u64>,
    ) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::generate("empty prompt"));
        }
        self.check_context(ids.len())?;
        // Tiled images (1-D positions from 0) share nothing with other
        // prompts; neither does a prompt whose placeholders are not found
        // (the forward says what is wrong with it).
        let span = match spec.tiled {
            true => None,
            false => placeholder_span(ids, spec),
        }
        .unwrap_or((0, usize::MAX));
        // A next turn with the same images continues the cache as text
        // (the images are in it already), and so does another prompt with
        // them whose ids hold all of their placeholders in what the cache
        // shares (a cache adopted from another sequence, say).
        let turn = self.continuation(ids);
        let keep = turn.max(self.shareable_with(ids, key));
        let same = self.has_images && key.is_some() && key == self.image_key;
        let past_images = keep == turn || keep >= self.image_span.1.max(span.1);
        if same && keep > 0 && past_images && self.keep(keep) == keep {
            self.prompt_len = ids.len();
            let logits = self.extend(runner, &ids[keep..])?;
            self.last_computed = ids.len() - keep;
            return Ok(logits);
        }
        // Else the text before the images, where the cache shares it and
        // the rest computed from there gets the bits of one step over the
        // whole prompt (chunk-invariant steps).
        let text = if runner.chunk_invariant() && self.any_cut {
            self.shareable_with(ids, None).min(span.0)
        } else {
            0
        };
        let start = if text > 0 { self.keep(text) } else { 0 };
        if start == 0 {
            self.reset();
        }
        let ids32: Vec<i32> = ids.iter().map(|&t| t as i32).collect();
        let (t, delta) = runner.prefill_images(&self.cache, &ids32, start, images, spec, true)?;
        self.collect_side(runner, start, ids.len() - start, false)?;
        self.pos_offset = delta;
        self.has_images = true;
        self.image_key = key;
        self.image_span = span;
        self.computed(runner, start, ids.len() - start);
        self.prompt_len = ids.len();
        self.cached = ids.to_vec();
        self.last_computed = ids.len() - start;
        let rows = t.shape()[0];
        Ok(t.narrow0(rows - 1, rows)?.to_f32_vec()?)
    }
}

/// Where a prompt's image and video placeholders lie: the first and one
/// past the last.
fn placeholder_span(ids: &[u32], spec: &ImageTokens) -> Option<(usize, usize)> {
    let is = |&t: &u32| t as i32 == spec.image || Some(t as i32) == spec.video;
    let first = ids.iter().position(is)?;
    let last = ids.iter().rposition(is)?;
    Some((first, last + 1))
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
