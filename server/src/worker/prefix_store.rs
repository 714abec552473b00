//! Prompt prefixes kept after their slot moves on (issue #31): when a slot
//! takes a request that does not continue what its cache holds, the whole
//! prompt chunks it computed from an empty cache (`Sequence::shareable_len`,
//! the part any prompt beginning with those tokens gets bit for bit) are
//! copied here first, unless another slot or an entry here holds them
//! already. A later request that begins with them (a shared system prompt,
//! a conversation coming back after other requests took its slot) copies
//! them into its slot instead of computing them. Entries are evicted least
//! recently used first to stay within `--cache-ram`; an entry whose tokens
//! begin another one's is dropped (the longer serves every prompt the
//! shorter could).
//!
//! Not paged: two entries that share a beginning but then differ each hold
//! a copy of it. Prompts with images are not kept (their positions depend
//! on the images), nor caches in device memory or with recurrent state
//! (`Sequence::copy_prefix` refuses them).

use mllm_runtime::Sequence;

pub(super) struct PrefixStore {
    /// Bytes the entries may hold together (0: keep nothing).
    budget: usize,
    entries: Vec<Entry>,
    /// Counts uses, for least-recently-used eviction.
    clock: u64,
}

struct Entry {
    seq: Sequence,
    bytes: usize,
    last_used: u64,
}

impl PrefixStore {
    pub(super) fn new(budget: usize) -> PrefixStore {
        PrefixStore {
            budget,
            entries: vec![],
            clock: 0,
        }
    }

    /// Bytes the entries hold.
    pub(super) fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether an entry holds all of `prefix`.
    pub(super) fn holds(&self, prefix: &[u32]) -> bool {
        self.entries.iter().any(|e| e.seq.holds(prefix))
    }

    /// Keeps a copy of `seq`'s shareable prefix; false where there is
    /// nothing to keep, it does not fit the budget or cannot be copied.
    /// The caller checks that no slot holds it already.
    pub(super) fn keep(&mut self, seq: &Sequence) -> bool {
        let n = seq.shareable_len();
        if n == 0 || self.budget == 0 || self.holds(&seq.cached[..n]) {
            return false;
        }
        let Some(copy) = seq.copy_prefix(n) else {
            return false;
        };
        let bytes = copy.kv_bytes();
        if bytes > self.budget {
            return false;
        }
        // Entries this one extends serve no prompt it cannot.
        self.entries.retain(|e| !copy.holds(&e.seq.cached));
        self.clock += 1;
        self.entries.push(Entry {
            seq: copy,
            bytes,
            last_used: self.clock,
        });
        while self.bytes() > self.budget {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.entries.swap_remove(oldest);
        }
        true
    }

    /// The entry that gives `ids` the most positions: (positions, entry).
    pub(super) fn best(&self, ids: &[u32]) -> Option<(usize, usize)> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.seq.shareable(ids), i))
            .filter(|&(n, _)| n > 0)
            .max()
    }

    /// Entry `i`, marked as just used.
    pub(super) fn take_use(&mut self, i: usize) -> Option<&Sequence> {
        self.clock += 1;
        let e = self.entries.get_mut(i)?;
        e.last_used = self.clock;
        Some(&e.seq)
    }
}

/// `--cache-ram` when not given: a quarter of the memory available now
/// (`MemAvailable`), or 256 MiB where that cannot be read.
pub fn default_budget_mib() -> usize {
    let available_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
    });
    available_kib.map_or(256, |k| k / 1024 / 4)
}
