//! Prompt prefixes kept after their slot moves on (issue #31), as pages of
//! `PAGE` positions in a radix tree over token ids (as SGLang's
//! RadixAttention, with vLLM's fixed-size blocks): a path from a root spells
//! a prefix, and prefixes that begin alike share the pages of their common
//! part. When a slot takes a request that does not continue what its cache
//! holds, the whole positions it computed from an empty cache
//! (`Sequence::shareable_len`, the part any prompt beginning with those
//! tokens gets bit for bit) are added here first, page by page, where the
//! tree lacks them. A later request that begins with a stored prefix (a
//! shared system prompt, a document asked about again, a conversation
//! coming back after other requests took its slot) gets its pages laid end
//! to end in its slot (`Sequence::adopt_pages`) instead of computing them.
//!
//! Pages are reference-counted (`Rc`): the tree holds one count, each
//! lookup's `Hit` another, so a page evicted while a hit is being adopted
//! stays alive until the copy is made. Eviction takes least recently used
//! leaves first (a page is evicted only after every page below it) to stay
//! within `--cache-ram`; a use refreshes every page of its path. The last
//! page of a prefix may hold fewer than `PAGE` positions; such a page is
//! always a leaf, and a longer prefix replaces it with a whole one.
//!
//! Tests: the tree's rules over fake pages (`tests` below); the sharing
//! itself in `cli/tests/serve_prefix.rs`.
//!
//! Slots' own caches stay contiguous (attention reads one buffer of rows),
//! so adopting a hit copies its pages once. Of a conversation with images
//! only the text before them is kept here (slots share past the images with
//! prompts of the same images: `Sequence::shareable_with`); caches in
//! device memory or with recurrent state are not kept (`Sequence::kv_page`
//! refuses them).

use std::rc::Rc;

use mllm_runtime::{KvPage, Sequence, PREFILL_CHUNK};

/// Positions a page holds (the last of a prefix may hold fewer).
pub(super) const PAGE: usize = 16;

/// What the store keeps pages of: a sequence's computed prefix (a trait so
/// the tree's rules are tested without a model).
pub(super) trait Source {
    type Page: Paged;
    /// The ids the cache holds.
    fn ids(&self) -> &[u32];
    /// See `Sequence::shareable_len`.
    fn shareable_len(&self) -> usize;
    /// See `Sequence::any_cut`.
    fn any_cut(&self) -> bool;
    /// See `Sequence::kv_page`.
    fn page(&self, start: usize, end: usize) -> Option<Self::Page>;
}

pub(super) trait Paged {
    /// Bytes the page holds.
    fn bytes(&self) -> usize;
}

impl Source for Sequence {
    type Page = KvPage;
    fn ids(&self) -> &[u32] {
        &self.cached
    }
    fn shareable_len(&self) -> usize {
        Sequence::shareable_len(self)
    }
    fn any_cut(&self) -> bool {
        Sequence::any_cut(self)
    }
    fn page(&self, start: usize, end: usize) -> Option<KvPage> {
        self.kv_page(start, end)
    }
}

impl Paged for KvPage {
    fn bytes(&self) -> usize {
        KvPage::bytes(self)
    }
}

pub(super) struct PrefixStore<P: Paged = KvPage> {
    /// Bytes the pages may hold together (0: keep nothing).
    budget: usize,
    /// Where steps are not chunk-invariant, a prompt takes whole chunks of
    /// this many positions (`PREFILL_CHUNK`).
    chunk: usize,
    /// The tree's pages; `None` marks a free slot (listed in `free`).
    nodes: Vec<Option<Node<P>>>,
    free: Vec<usize>,
    /// The first pages of the stored prefixes.
    roots: Vec<usize>,
    bytes: usize,
    /// Counts uses, for least-recently-used eviction.
    clock: u64,
}

struct Node<P> {
    /// The ids of the positions the page holds.
    ids: Vec<u32>,
    page: Rc<P>,
    parent: Option<usize>,
    children: Vec<usize>,
    last_used: u64,
    /// Whether the page's positions were computed where any cut of a
    /// prompt gives the same bits.
    any_cut: bool,
}

/// A stored prefix of a prompt: its first `n` ids, held by `pages` laid end
/// to end (the last may hold more than is taken).
pub(super) struct Hit<P> {
    pub(super) n: usize,
    pub(super) pages: Vec<Rc<P>>,
    pub(super) any_cut: bool,
}

/// How far the tree spells `ids`: the pages matched whole, then a page
/// matched in part (page, ids in common).
struct Walk {
    path: Vec<usize>,
    partial: Option<(usize, usize)>,
    matched: usize,
}

impl<P: Paged> PrefixStore<P> {
    pub(super) fn new(budget: usize) -> PrefixStore<P> {
        PrefixStore::with_chunk(budget, PREFILL_CHUNK)
    }

    fn with_chunk(budget: usize, chunk: usize) -> PrefixStore<P> {
        PrefixStore {
            budget,
            chunk,
            nodes: vec![],
            free: vec![],
            roots: vec![],
            bytes: 0,
            clock: 0,
        }
    }

    /// Bytes the pages hold.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Pages held.
    pub(super) fn pages(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Distinct prefixes held (the tree's leaves).
    pub(super) fn prefixes(&self) -> usize {
        self.nodes
            .iter()
            .flatten()
            .filter(|n| n.children.is_empty())
            .count()
    }

    fn node(&self, i: usize) -> &Node<P> {
        self.nodes[i].as_ref().expect("a live page")
    }

    fn node_mut(&mut self, i: usize) -> &mut Node<P> {
        self.nodes[i].as_mut().expect("a live page")
    }

    fn children(&self, parent: Option<usize>) -> &[usize] {
        match parent {
            Some(p) => &self.node(p).children,
            None => &self.roots,
        }
    }

    fn walk(&self, ids: &[u32]) -> Walk {
        let mut w = Walk {
            path: vec![],
            partial: None,
            matched: 0,
        };
        loop {
            let rest = &ids[w.matched..];
            let parent = w.path.last().copied();
            let children = self.children(parent);
            if let Some(&c) = children
                .iter()
                .find(|&&c| rest.starts_with(&self.node(c).ids))
            {
                w.path.push(c);
                w.matched += self.node(c).ids.len();
                if self.node(c).ids.len() == PAGE {
                    continue;
                }
                return w;
            }
            w.partial = children
                .iter()
                .map(|&c| (c, common_prefix(&self.node(c).ids, rest)))
                .filter(|&(_, n)| n > 0)
                .max_by_key(|&(_, n)| n);
            w.matched += w.partial.map_or(0, |p| p.1);
            return w;
        }
    }

    /// The longest stored prefix `ids` may take: at least one id is left to
    /// compute (its logits are needed), and whole chunks only where a page
    /// on the way was computed by steps that are not chunk-invariant.
    pub(super) fn best(&self, ids: &[u32]) -> Option<Hit<P>> {
        let w = self.walk(ids);
        let nodes: Vec<usize> = w
            .path
            .iter()
            .copied()
            .chain(w.partial.map(|p| p.0))
            .collect();
        let any_cut = nodes.iter().all(|&i| self.node(i).any_cut);
        let m = w.matched.min(ids.len().saturating_sub(1));
        let n = if any_cut { m } else { m - m % self.chunk };
        if n == 0 {
            return None;
        }
        let mut pages = vec![];
        let mut covered = 0;
        for i in nodes {
            if covered >= n {
                break;
            }
            covered += self.node(i).ids.len();
            pages.push(self.node(i).page.clone());
        }
        Some(Hit { n, pages, any_cut })
    }

    /// Marks the pages that spell `prefix` as just used.
    pub(super) fn touch(&mut self, prefix: &[u32]) {
        self.clock += 1;
        let w = self.walk(prefix);
        for i in w.path.into_iter().chain(w.partial.map(|p| p.0)) {
            let clock = self.clock;
            self.node_mut(i).last_used = clock;
        }
    }

    /// Adds the pages of `seq`'s shareable prefix the tree lacks, then
    /// evicts to stay within the budget (this prefix's own pages last, its
    /// first ones kept where it does not fit whole); true where a page was
    /// added.
    pub(super) fn keep<S: Source<Page = P>>(&mut self, seq: &S) -> bool {
        let n = seq.shareable_len().min(seq.ids().len());
        if n == 0 || self.budget == 0 {
            return false;
        }
        let ids = &seq.ids()[..n];
        self.clock += 1;
        let clock = self.clock;
        let mut parent = None;
        let mut pos = 0;
        let mut added = false;
        while pos < n {
            let end = (pos + PAGE).min(n);
            let want = &ids[pos..end];
            let children = self.children(parent);
            // A page that holds these ids (the same, or a whole page that
            // begins with a last page's ids).
            if let Some(&c) = children
                .iter()
                .find(|&&c| self.node(c).ids.starts_with(want))
            {
                let node = self.node_mut(c);
                node.last_used = clock;
                node.any_cut |= seq.any_cut();
                parent = Some(c);
                pos = end;
                continue;
            }
            // A shorter last page these ids extend serves nothing they
            // do not: replaced (it is a leaf).
            if let Some(&c) = children
                .iter()
                .find(|&&c| want.starts_with(&self.node(c).ids))
            {
                self.remove(c);
            }
            let Some(page) = seq.page(pos, end) else {
                break;
            };
            let bytes = page.bytes();
            let node = Node {
                ids: want.to_vec(),
                page: Rc::new(page),
                parent,
                children: vec![],
                last_used: clock,
                any_cut: seq.any_cut(),
            };
            let i = match self.free.pop() {
                Some(i) => {
                    self.nodes[i] = Some(node);
                    i
                }
                None => {
                    self.nodes.push(Some(node));
                    self.nodes.len() - 1
                }
            };
            match parent {
                Some(p) => self.node_mut(p).children.push(i),
                None => self.roots.push(i),
            }
            self.bytes += bytes;
            added = true;
            parent = Some(i);
            pos = end;
        }
        self.evict();
        added
    }

    /// Removes least recently used leaves until the pages fit the budget.
    fn evict(&mut self) {
        while self.bytes > self.budget {
            let leaf = self
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
                .filter(|(_, n)| n.children.is_empty())
                .min_by_key(|(_, n)| n.last_used)
                .map(|(i, _)| i);
            match leaf {
                Some(i) => self.remove(i),
                None => break,
            }
        }
    }

    /// Removes leaf `i`.
    fn remove(&mut self, i: usize) {
        let Some(node) = self.nodes[i].take() else {
            return;
        };
        debug_assert!(node.children.is_empty(), "only leaves are removed");
        let siblings = match node.parent {
            Some(p) => &mut self.node_mut(p).children,
            None => &mut self.roots,
        };
        siblings.retain(|&c| c != i);
        self.bytes -= node.page.bytes();
        self.free.push(i);
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
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
mod tests;
