//! The worker's loop: take jobs, admit waiting requests into slots, and
//! run rounds (one batched decode step for every slot past its prompt, one
//! prompt chunk for one slot still reading its prompt).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use mllm_runtime::model_files;
use mllm_runtime::tool_calls::ToolFormat;
use mllm_runtime::{KvPage, Runner, Sequence};

use super::prefix_store::{Hit, PrefixStore};
use super::slot::{self, Active};
use super::speculate::{self, Speculation};
use super::{prepare, Event, Job, ModelInfo, PreparedPrompt, WorkerConfig};
use crate::api::error::{engine_message, ApiError};
use crate::metrics::ModelMetrics;

pub(super) struct Worker {
    files: model_files::ModelFiles,
    runner: Runner,
    slots: Vec<Slot>,
    pub(super) info: ModelInfo,
    metrics: Arc<ModelMetrics>,
    inflight: Arc<AtomicUsize>,
    /// Requests tokenized and waiting for a slot, oldest first.
    waiting: VecDeque<slot::Pending>,
    /// The slot whose prompt chunk comes next (prompts take turns).
    turn: usize,
    /// `MLLM_SERVE_FAULT`: a request whose prompt holds this text panics
    /// in its first decode step (fault injection, for tests of the panic
    /// path; unset in normal use).
    fault: Option<String>,
    /// `--spec-type`: slots propose tokens and verify them in one step.
    spec: Option<Speculation>,
    /// Prompt prefixes kept after their slot moved on (`--cache-ram`).
    store: PrefixStore,
}

/// Tokens per slot when `--ctx-size` does not say: a phone has no memory
/// for a 32k-token cache per slot that most chats never fill.
pub const DEFAULT_SLOT_CONTEXT: usize = 4096;

/// `--ctx-size` within the model's own context; by default the smaller of
/// the model's and `DEFAULT_SLOT_CONTEXT`.
fn slot_context(asked: Option<usize>, model: Option<usize>) -> usize {
    match (asked, model) {
        (Some(c), Some(m)) => c.min(m),
        (Some(c), None) => c,
        (None, Some(m)) => m.min(DEFAULT_SLOT_CONTEXT),
        (None, None) => DEFAULT_SLOT_CONTEXT,
    }
}

struct Slot {
    seq: Sequence,
    active: Option<Active>,
    /// When the slot last finished a request (least recently used wins ties).
    last_used: Instant,
}

impl Worker {
    pub(super) fn load(
        cfg: &WorkerConfig,
        metrics: Arc<ModelMetrics>,
        inflight: Arc<AtomicUsize>,
    ) -> Result<Worker, String> {
        let files = model_files::open_with_mmproj(&cfg.path, cfg.mmproj.as_deref(), cfg.load)
            .map_err(|e| engine_message(&e))?;
        files.tokenizer().map_err(|e| engine_message(&e))?;
        let model = model_files::load_model(&files, cfg.script.as_deref())
            .map_err(|e| engine_message(&e))?;
        let context = slot_context(cfg.ctx_size, files.max_context());
        let mut runner = Runner::new(model);
        runner.compile_default(context);
        mllm_runtime::engine::configure_runner(&mut runner, &cfg.load);
        let mut slots = vec![];
        for _ in 0..cfg.slots.max(1) {
            let mut seq = Sequence::new(Some(context));
            seq.set_kv_dtype(cfg.load.kv.0)
                .map_err(|e| engine_message(&e))?;
            slots.push(Slot {
                seq,
                active: None,
                last_used: Instant::now(),
            });
        }
        let spec = match &cfg.spec {
            Some(s) => {
                let mut seqs: Vec<&mut Sequence> = slots.iter_mut().map(|s| &mut s.seq).collect();
                Some(Speculation::load(
                    s,
                    &files,
                    cfg.load,
                    &mut runner,
                    &mut seqs,
                    context,
                )?)
            }
            None => None,
        };
        let kv = cfg.load.kv.0;
        let info = ModelInfo {
            context,
            kv_bytes: files.kv_bytes_at(context, kv.size() as f64 / kv.block_size() as f64),
            vision: files.config.get("vision_config").is_some(),
            has_template: files.chat_template.is_some(),
            tool_format: files
                .chat_template
                .as_ref()
                .map_or(ToolFormat::Generic, |t| ToolFormat::detect(t.source())),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        };
        Ok(Worker {
            files,
            runner,
            slots,
            info,
            metrics,
            inflight,
            waiting: VecDeque::new(),
            turn: 0,
            fault: std::env::var("MLLM_SERVE_FAULT")
                .ok()
                .filter(|t| !t.is_empty()),
            spec,
            store: PrefixStore::new(cfg.cache_ram),
        })
    }

    pub(super) fn run(mut self, jobs: mpsc::Receiver<Job>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some()) || !self.waiting.is_empty();
            let job = if busy {
                match jobs.try_recv() {
                    Ok(j) => Some(j),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            } else {
                match jobs.recv() {
                    Ok(j) => Some(j),
                    Err(_) => return,
                }
            };
            if let Some(job) = job {
                self.take(job);
                // Take everything that arrived before doing more work.
                continue;
            }
            self.admit();
            self.work();
        }
    }

    /// Answers a quick job at once; tokenizes a generation and queues it.
    fn take(&mut self, job: Job) {
        match job {
            Job::Generate(g) => {
                let files = &self.files;
                let ready = guarded(|| {
                    let p = prepare::prompt(files, &g.prompt, self.info.context)?;
                    let c = g.params.constraint.as_ref().map(|spec| {
                        files
                            .constraint(spec)
                            .map_err(|e| ApiError::bad_request(e.to_string()))
                    });
                    Ok((p, c.transpose()?))
                });
                match ready.unwrap_or_else(|why| Err(crash_error(&why))) {
                    Ok((p, constraint)) => {
                        let fault = self
                            .fault
                            .as_deref()
                            .is_some_and(|t| mentions(&g.prompt, t));
                        if g.events
                            .send(Event::Started {
                                prompt_tokens: p.ids.len(),
                                thinking: prepare::opens_thinking(&self.files, &p.ids),
                            })
                            .is_ok()
                        {
                            self.waiting
                                .push_back(slot::Pending::new(*g, p, constraint, fault));
                        } else {
                            self.inflight.fetch_sub(1, Ordering::SeqCst);
                        }
                    }
                    Err(e) => {
                        self.inflight.fetch_sub(1, Ordering::SeqCst);
                        self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                        let _ = g.events.send(Event::Error(e));
                    }
                }
            }
            Job::Tokenize {
                text,
                add_special,
                with_pieces,
                reply,
            } => {
                let r = guarded(|| prepare::tokenize(&self.files, &text, add_special, with_pieces));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
            Job::Detokenize { ids, reply } => {
                let r = guarded(|| prepare::detokenize(&self.files, &ids));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
            Job::Template {
                messages,
                enable_thinking,
                reply,
            } => {
                let r = guarded(|| prepare::template(&self.files, &messages, enable_thinking));
                let _ = reply.send(r.unwrap_or_else(|why| Err(crash_error(&why))));
            }
        }
    }

    /// Moves waiting requests into free slots: the slot whose cache the
    /// prompt continues (a conversation's next turn), else the least
    /// recently used.
    fn admit(&mut self) {
        while !self.waiting.is_empty() {
            let Some(pending) = self.waiting.front() else {
                break;
            };
            if pending.cancelled() {
                self.waiting.pop_front();
                self.inflight.fetch_sub(1, Ordering::SeqCst);
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let ids = &pending.prompt.ids;
            // Images are keyed by their pixels: a cache holding the same
            // ones shares past them, any other the text before them.
            let key = pending.prompt.images.as_ref().map(|i| i.2);
            let own = |s: &Slot| s.seq.continuation(ids).max(s.seq.shareable_with(ids, key));
            let best = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .max_by_key(|(_, s)| (own(s), std::cmp::Reverse(s.last_used)))
                .map(|(i, s)| (i, own(s)));
            let Some((i, reuse)) = best else {
                break;
            };
            // Another slot (busy or not), or the prefix cache, may hold
            // more of this prompt: its shareable prefix is copied instead
            // of recomputed (`Sequence::shareable`).
            let donor = self
                .slots
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(j, s)| (s.seq.shareable_with(ids, key), j))
                .max()
                .filter(|&(n, _)| n > reuse);
            // A prefix-cache hit is worth taking where it gives more than
            // the slot and the donor.
            let better = |h: &Hit<KvPage>| h.n > reuse.max(donor.map_or(0, |d| d.0));
            let mut stored = self.store.best(ids).filter(better);
            // What only slot i holds is kept before its cache changes.
            let own = self.slots[i].seq.shareable_len();
            let kept = if donor.is_some() || stored.is_some() {
                0
            } else {
                reuse
            };
            if own > kept {
                let prefix = &self.slots[i].seq.cached[..own];
                let elsewhere = self
                    .slots
                    .iter()
                    .enumerate()
                    .any(|(j, s)| j != i && s.seq.holds(prefix));
                if !elsewhere && self.store.keep(&self.slots[i].seq) {
                    // The slot's pages may give this prompt more.
                    stored = self.store.best(ids).filter(better);
                }
            }
            if let Some(hit) = stored {
                let pages: Vec<&KvPage> = hit.pages.iter().map(|p| &**p).collect();
                let n = hit.n;
                if self.slots[i]
                    .seq
                    .adopt_pages(&ids[..n], &pages, hit.any_cut)
                {
                    self.store.touch(&ids[..n]);
                    self.metrics
                        .prompt_shared
                        .fetch_add(n as u64, Ordering::Relaxed);
                    self.metrics
                        .prompt_from_cache
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
            } else if let Some((n, j)) = donor {
                let (to, from) = if i < j {
                    let (a, b) = self.slots.split_at_mut(j);
                    (&mut a[i], &b[0])
                } else {
                    let (a, b) = self.slots.split_at_mut(i);
                    (&mut b[0], &a[j])
                };
                if to.seq.adopt_prefix(&from.seq, n) {
                    self.metrics
                        .prompt_shared
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            self.metrics
                .prefix_cache_bytes
                .store(self.store.bytes(), Ordering::Relaxed);
            self.metrics
                .prefix_cache_entries
                .store(self.store.prefixes(), Ordering::Relaxed);
            self.metrics
                .prefix_cache_pages
                .store(self.store.pages(), Ordering::Relaxed);
            let Some(pending) = self.waiting.pop_front() else {
                break;
            };
            let slot = &mut self.slots[i];
            let budget = self.spec.as_ref().map_or(0, |s| s.config.draft_max);
            match Active::start(pending, &mut slot.seq, &self.files, budget) {
                Ok(a) => slot.active = Some(a),
                Err((events, e)) => {
                    self.inflight.fetch_sub(1, Ordering::SeqCst);
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    let _ = events.send(Event::Error(e));
                }
            }
        }
        self.metrics.busy.store(
            self.slots.iter().filter(|s| s.active.is_some()).count(),
            Ordering::Relaxed,
        );
    }

    /// One round: a token for every slot past its prompt (sampled, then
    /// computed together in one batched step), then one prompt chunk for
    /// one slot still reading its prompt (taking turns), so a long prompt
    /// delays the running streams by one chunk per token at most.
    fn work(&mut self) {
        for slot in &mut self.slots {
            if slot.active.as_ref().is_some_and(Active::cancelled) {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                slot.free(&self.inflight);
            }
        }
        self.decode_round();
        self.prefill_round();
        self.metrics.busy.store(
            self.slots.iter().filter(|s| s.active.is_some()).count(),
            Ordering::Relaxed,
        );
    }

    fn decode_round(&mut self) {
        let mut feed = vec![];
        let mut crashes = vec![];
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            if active.prefilling() {
                continue;
            }
            let next = guarded(|| {
                if active.fault {
                    panic!("a fault injected by MLLM_SERVE_FAULT");
                }
                active.sample(&slot.seq, &self.metrics)
            });
            match next {
                Ok(slot::Next::Feed(token)) => feed.push((i, token)),
                Ok(slot::Next::Wait) => {}
                Ok(slot::Next::Finished) => {
                    if let Some(spec) = self.spec.as_mut() {
                        spec.learn(&slot.seq.cached);
                    }
                    slot.free(&self.inflight)
                }
                Err(why) => crashes.push((i, why)),
            }
        }
        for (i, why) in crashes {
            self.crashed(i, &why);
        }
        if feed.is_empty() {
            return;
        }
        if let Some(mut spec) = self.spec.take() {
            self.verify_round(&mut spec, feed);
            self.spec = Some(spec);
            return;
        }
        let rows: Vec<(usize, Vec<u32>)> = feed.into_iter().map(|(i, t)| (i, vec![t])).collect();
        for (i, mut logits) in self.step_rows(&rows) {
            if let (Some(a), Some(l)) = (self.slots[i].active.as_mut(), logits.pop()) {
                a.set_logits(l);
            }
        }
    }

    /// Computes `rows[b].1` after slot `rows[b].0`'s cache, all in one
    /// batched step (one stream: its own step, through captured graphs),
    /// and returns each slot's logits after each of its tokens. A failure
    /// or a panic fails every slot of the step (their caches may be half
    /// written) and returns nothing.
    fn step_rows(&mut self, rows: &[(usize, Vec<u32>)]) -> Vec<(usize, Vec<Vec<f32>>)> {
        let runner = &mut self.runner;
        let mut seqs: Vec<&mut Sequence> = self
            .slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| rows.iter().any(|(j, _)| j == i))
            .map(|(_, s)| &mut s.seq)
            .collect();
        let ids: Vec<&[u32]> = rows.iter().map(|(_, r)| r.as_slice()).collect();
        let result = guarded(|| {
            if let [seq] = seqs.as_mut_slice() {
                seq.extend_rows(runner, ids[0]).map(|r| vec![r])
            } else {
                Sequence::extend_batch(runner, &mut seqs, &ids)
            }
        });
        match result {
            Ok(Ok(all)) => rows.iter().map(|&(i, _)| i).zip(all).collect(),
            Ok(Err(e)) => {
                for &(i, _) in rows {
                    self.failed(i, ApiError::internal(engine_message(&e)));
                }
                vec![]
            }
            Err(why) => {
                for &(i, _) in rows {
                    self.crashed(i, &why);
                }
                vec![]
            }
        }
    }

    /// The decode round with speculation: each slot in `feed` proposes
    /// tokens after its own, all rows run in one batched step, and each
    /// slot keeps what its generation core accepts.
    fn verify_round(&mut self, spec: &mut Speculation, feed: Vec<(usize, u32)>) {
        let mut rows: Vec<(usize, Vec<u32>)> = vec![];
        let mut proposals = vec![];
        for (i, token) in feed {
            let slot = &self.slots[i];
            let Some(active) = slot.active.as_ref() else {
                continue;
            };
            let seq = &self.slots[i].seq;
            let room = seq
                .max_context
                .map_or(usize::MAX, |m| m.saturating_sub(seq.cached.len() + 1));
            let max = active
                .spec_budget
                .min(active.remaining().saturating_sub(1))
                .min(room);
            let mut history = Vec::with_capacity(seq.cached.len() + 1);
            history.extend_from_slice(&seq.cached);
            history.push(token);
            let target = mllm_runtime::speculative::TargetView {
                model: &self.runner.model,
                hidden: self.slots[i].seq.hidden.as_mut(),
            };
            match guarded(|| spec.propose(i, &history, max, target)) {
                Ok(Ok(p)) => {
                    rows.push((i, vec![token]));
                    proposals.push(p);
                }
                Ok(Err(e)) => self.failed(i, ApiError::internal(e)),
                Err(why) => self.crashed(i, &why),
            }
        }
        self.metrics
            .spec_draft_steps
            .fetch_add(spec.take_draft_steps() as u64, Ordering::Relaxed);
        speculate::fit_rows(&mut proposals);
        for ((_, ids), p) in rows.iter_mut().zip(&proposals) {
            ids.extend_from_slice(p);
        }
        if rows.is_empty() {
            return;
        }
        // A recurrent layer's state would keep rejected proposals: each
        // such slot remembers it before the step (`Sequence::take_back`).
        let checkpoints: Vec<_> = rows
            .iter()
            .zip(&proposals)
            .map(|((i, _), p)| (!p.is_empty()).then(|| self.slots[*i].seq.checkpoint())?)
            .collect();
        let budget = (spec.kind(), spec.config.draft_max);
        // `step_rows` answers in the order of `rows` (or not at all).
        let answered = self.step_rows(&rows).into_iter().zip(&proposals);
        for (((i, logits), proposed), checkpoint) in answered.zip(checkpoints) {
            let slot = &mut self.slots[i];
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            let runner = &mut self.runner;
            let next = guarded(|| {
                a.verify(
                    &mut slot.seq,
                    runner,
                    checkpoint,
                    proposed,
                    logits,
                    &self.metrics,
                    budget,
                )
            });
            match next {
                Ok(slot::Next::Finished) => {
                    spec.learn(&slot.seq.cached);
                    slot.free(&self.inflight);
                }
                Ok(_) => {}
                Err(why) => self.crashed(i, &why),
            }
        }
    }

    fn prefill_round(&mut self) {
        let n = self.slots.len();
        let Some(i) = (0..n).map(|k| (self.turn + k) % n).find(|&i| {
            self.slots[i]
                .active
                .as_ref()
                .is_some_and(Active::prefilling)
        }) else {
            return;
        };
        self.turn = (i + 1) % n;
        let slot = &mut self.slots[i];
        let Some(active) = slot.active.as_mut() else {
            return;
        };
        match guarded(|| active.prefill(&mut self.runner, &mut slot.seq, &self.metrics)) {
            Ok(slot::Progress::Running) => {
                let Some(spec) = self.spec.as_mut() else {
                    return;
                };
                match guarded(|| spec.prefill(i, &slot.seq.cached)) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => self.failed(i, ApiError::internal(e)),
                    Err(why) => self.crashed(i, &why),
                }
            }
            Ok(slot::Progress::Finished) => slot.free(&self.inflight),
            Err(why) => self.crashed(i, &why),
        }
    }

    /// A request that failed: tell its client, free its slot.
    fn failed(&mut self, i: usize, e: ApiError) {
        let slot = &mut self.slots[i];
        if let Some(a) = slot.active.as_mut() {
            a.fail(e);
        }
        self.metrics.failed.fetch_add(1, Ordering::Relaxed);
        // The cache may be half-written: start the slot afresh.
        slot.seq.reset();
        slot.free(&self.inflight);
    }

    /// A panic inside the engine on slot `i`'s request: only that request fails.
    fn crashed(&mut self, i: usize, why: &str) {
        self.failed(i, crash_error(why));
    }
}

impl Slot {
    /// Ends the slot's request (its answer is sent or it failed).
    fn free(&mut self, inflight: &AtomicUsize) {
        if self.active.take().is_some() {
            inflight.fetch_sub(1, Ordering::SeqCst);
        }
        self.last_used = Instant::now();
    }
}

fn crash_error(why: &str) -> ApiError {
    ApiError::internal(format!(
        "the engine failed on this request (a bug; please report it): {why}"
    ))
}

/// Whether a prompt's text holds `needle` (for `MLLM_SERVE_FAULT`).
fn mentions(p: &PreparedPrompt, needle: &str) -> bool {
    match p {
        PreparedPrompt::Chat { messages, .. } => messages.iter().any(|m| m.text.contains(needle)),
        PreparedPrompt::Text(t) => t.contains(needle),
        PreparedPrompt::Ids(_) => false,
    }
}

/// Runs `f`, turning a panic into its message.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown".into())
    })
}
