//! A bounded n-gram cache shared by a server's slots: what followed each
//! short run of tokens in the conversations that ran before (their prompts
//! and answers). Requests that share a system prompt, a document or a
//! template repeat each other's text, which prompt lookup over one
//! conversation cannot see; llama.cpp's `llama-lookup` keeps such a
//! "dynamic" cache too. A guess from it is verified like any other, so a
//! stale or colliding entry costs a wasted row, never a changed answer.

use std::collections::{HashMap, VecDeque};

pub struct NgramCache {
    /// Longest and shortest key (tokens), tried longest first.
    max_n: usize,
    min_n: usize,
    /// Tokens kept after each key.
    continuation: usize,
    /// Most keys held; the oldest go first.
    capacity: usize,
    /// Key hash -> (the continuation, when it was written).
    map: HashMap<u64, (Vec<u32>, u64)>,
    /// Keys in the order written, with their write stamp (a key written
    /// again is only evicted by its newest entry).
    order: VecDeque<(u64, u64)>,
    clock: u64,
}

impl NgramCache {
    /// Keys of 2 to 4 tokens, `continuation` tokens after each, at most
    /// `capacity` keys.
    pub fn new(continuation: usize, capacity: usize) -> NgramCache {
        NgramCache {
            max_n: 4,
            min_n: 2,
            continuation: continuation.max(1),
            capacity: capacity.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
            clock: 0,
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Records what follows every run of 2 to 4 tokens of `tokens` (a
    /// finished conversation); later text overwrites earlier.
    pub fn learn(&mut self, tokens: &[u32]) {
        for end in self.min_n..tokens.len() {
            for n in self.min_n..=self.max_n.min(end) {
                let key = hash(&tokens[end - n..end]);
                let stop = (end + self.continuation).min(tokens.len());
                self.insert(key, tokens[end..stop].to_vec());
            }
        }
    }

    fn insert(&mut self, key: u64, continuation: Vec<u32>) {
        self.clock += 1;
        self.map.insert(key, (continuation, self.clock));
        self.order.push_back((key, self.clock));
        while self.map.len() > self.capacity {
            let Some((old, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.map.get(&old).is_some_and(|(_, s)| *s == stamp) {
                self.map.remove(&old);
            }
        }
        // Superseded stamps pile up in `order` when keys repeat: drop them
        // once they outnumber the live ones.
        if self.order.len() > 2 * self.capacity {
            let map = &self.map;
            self.order
                .retain(|(k, s)| map.get(k).is_some_and(|(_, live)| live == s));
        }
    }

    /// What followed the last 4, 3 or 2 tokens of `history` (longest
    /// first) when it was last seen; at most `max` tokens.
    pub fn lookup(&self, history: &[u32], max: usize) -> Vec<u32> {
        let len = history.len();
        for n in (self.min_n..=self.max_n).rev() {
            if len < n {
                continue;
            }
            if let Some((c, _)) = self.map.get(&hash(&history[len - n..])) {
                return c.iter().copied().take(max).collect();
            }
        }
        vec![]
    }
}

/// FNV-1a over the key's length and tokens (a collision only costs a
/// wasted verification row).
fn hash(key: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |x: u32| {
        for b in x.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    mix(key.len() as u32);
    for &t in key {
        mix(t);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_continuations_and_stays_bounded() {
        let mut c = NgramCache::new(3, 1000);
        c.learn(&[1, 2, 3, 4, 5, 6, 7]);
        // The longest key that matches wins.
        assert_eq!(c.lookup(&[9, 2, 3, 4], 8), vec![5, 6, 7]);
        assert_eq!(c.lookup(&[9, 9, 3, 4], 2), vec![5, 6]);
        assert_eq!(c.lookup(&[8, 9], 4), Vec::<u32>::new());
        // Later text overwrites.
        c.learn(&[3, 4, 9, 9]);
        assert_eq!(c.lookup(&[3, 4], 4), vec![9, 9]);
        let mut small = NgramCache::new(2, 10);
        let long: Vec<u32> = (0..500).map(|i| i % 97).collect();
        small.learn(&long);
        small.learn(&long);
        assert!(small.len() <= 10, "{}", small.len());
        assert!(small.order.len() <= 20 + 1, "{}", small.order.len());
        // The newest keys survive.
        assert_eq!(small.lookup(&long[..497], 2), vec![long[497], long[498]]);
    }
}
