//! Prompt prefixes kept after their slot moves on (issue #31): when a slot
//! takes a request that does not continue what its cache holds, the whole
//! positions it computed from an empty cache (`Sequence::shareable_len`,
//! the part any prompt beginning with those tokens gets bit for bit) are
//! copied here first, unless another slot or an entry here holds them
//! already. A later request that begins with them (a shared system prompt,
//! a conversation coming back after other requests took its slot) copies
//! them into its slot instead of computing them. Entries are evicted least
//! recently used first to stay within `--cache-ram`; an entry whose tokens
//! begin another one's is dropped (the longer serves every prompt the
//! shorter could).
//!
//! Tests: the eviction rules over fake caches (`tests` below); the
//! sharing itself in `cli/tests/serve_prefix.rs`.
//!
//! Not paged: two entries that share a beginning but then differ each hold
//! a copy of it. Of a conversation with images only the text before them
//! is kept here (slots share past the images with prompts of the same
//! images: `Sequence::shareable_with`); caches in device memory or with
//! recurrent state are not kept (`Sequence::copy_prefix` refuses them).

use mllm_runtime::Sequence;

/// What the store keeps: a sequence's computed prefix (a trait so the
/// eviction rules are tested without a model).
pub(super) trait Stored: Sized {
    /// The ids the cache holds.
    fn ids(&self) -> &[u32];
    /// See `Sequence::shareable_len`.
    fn shareable_len(&self) -> usize;
    /// See `Sequence::shareable`.
    fn shareable(&self, ids: &[u32]) -> usize;
    /// See `Sequence::copy_prefix`.
    fn copy_prefix(&self, n: usize) -> Option<Self>;
    /// Bytes the cache holds.
    fn kv_bytes(&self) -> usize;
    /// Whether the cache gives all of `prefix`.
    fn holds(&self, prefix: &[u32]) -> bool {
        prefix.len() <= self.shareable_len() && self.ids().starts_with(prefix)
    }
}

impl Stored for Sequence {
    fn ids(&self) -> &[u32] {
        &self.cached
    }
    fn shareable_len(&self) -> usize {
        Sequence::shareable_len(self)
    }
    fn shareable(&self, ids: &[u32]) -> usize {
        Sequence::shareable(self, ids)
    }
    fn copy_prefix(&self, n: usize) -> Option<Self> {
        Sequence::copy_prefix(self, n)
    }
    fn kv_bytes(&self) -> usize {
        Sequence::kv_bytes(self)
    }
}

pub(super) struct PrefixStore<S: Stored = Sequence> {
    /// Bytes the entries may hold together (0: keep nothing).
    budget: usize,
    entries: Vec<Entry<S>>,
    /// Counts uses, for least-recently-used eviction.
    clock: u64,
}

struct Entry<S> {
    seq: S,
    bytes: usize,
    last_used: u64,
}

impl<S: Stored> PrefixStore<S> {
    pub(super) fn new(budget: usize) -> PrefixStore<S> {
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
    pub(super) fn keep(&mut self, seq: &S) -> bool {
        let n = seq.shareable_len();
        if n == 0 || self.budget == 0 || self.holds(&seq.ids()[..n]) {
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
        self.entries.retain(|e| !copy.holds(e.seq.ids()));
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
    pub(super) fn take_use(&mut self, i: usize) -> Option<&S> {
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

#[cfg(test)]
mod tests {
    use super::{PrefixStore, Stored};

    /// A cache of `ids`, every position shareable, 10 bytes a position.
    #[derive(Clone, Debug)]
    struct Fake(Vec<u32>);

    impl Stored for Fake {
        fn ids(&self) -> &[u32] {
            &self.0
        }
        fn shareable_len(&self) -> usize {
            self.0.len()
        }
        fn shareable(&self, ids: &[u32]) -> usize {
            let common = self.0.iter().zip(ids).take_while(|(a, b)| a == b).count();
            common.min(ids.len().saturating_sub(1))
        }
        fn copy_prefix(&self, n: usize) -> Option<Self> {
            Some(Fake(self.0[..n].to_vec()))
        }
        fn kv_bytes(&self) -> usize {
            10 * self.0.len()
        }
    }

    fn fake(first: u32, n: u32) -> Fake {
        Fake((first..first + n).collect())
    }

    fn kept(store: &PrefixStore<Fake>) -> Vec<u32> {
        let mut v: Vec<u32> = store.entries.iter().map(|e| e.seq.0[0]).collect();
        v.sort();
        v
    }

    #[test]
    fn evicts_the_least_recently_used_within_the_budget() {
        // 100 bytes: three 3-position entries fit, a fourth evicts one.
        let mut store = PrefixStore::new(100);
        for first in [0, 100, 200] {
            assert!(store.keep(&fake(first, 3)));
        }
        assert_eq!((store.len(), store.bytes()), (3, 90));
        // Entry 0 used: entry 100 is now the least recently used.
        let (n, i) = store.best(&[0, 1, 2, 7]).expect("a hit");
        assert_eq!(n, 3);
        assert_eq!(store.take_use(i).map(|s| s.0[0]), Some(0));
        assert!(store.keep(&fake(300, 3)));
        assert_eq!(kept(&store), [0, 200, 300]);
        assert!(store.bytes() <= 100);
        // A prefix held already is not kept twice; one over the whole
        // budget is not kept at all.
        assert!(!store.keep(&fake(200, 2)));
        assert!(!store.keep(&fake(500, 11)));
        assert_eq!(kept(&store), [0, 200, 300]);
        // A larger entry evicts as many as it needs, least recently used
        // first: 200, then 0 (used before 300 was kept).
        assert!(store.keep(&fake(400, 6)));
        assert_eq!(kept(&store), [300, 400]);
        // Nothing kept with a budget of 0.
        let mut none = PrefixStore::new(0);
        assert!(!none.keep(&fake(0, 3)));
        assert_eq!(none.len(), 0);
    }

    #[test]
    fn an_entry_that_extends_another_replaces_it_and_the_longest_match_wins() {
        let mut store = PrefixStore::new(1000);
        assert!(store.keep(&fake(0, 4)));
        assert!(store.keep(&Fake(vec![0, 1, 9, 9, 9])));
        // [0..8) extends [0..4): the shorter goes.
        assert!(store.keep(&fake(0, 8)));
        assert_eq!(store.len(), 2);
        assert!(store.holds(&[0, 1, 2, 3]));
        // The prompt 0..6 gets 5 positions (one is left to compute) from
        // the long entry, not 2 from the other.
        let prompt: Vec<u32> = (0..6).collect();
        let (n, i) = store.best(&prompt).expect("a hit");
        assert_eq!(n, 5);
        assert_eq!(store.take_use(i).map(|s| s.0.len()), Some(8));
        assert_eq!(store.best(&[7, 7]), None);
    }
}
