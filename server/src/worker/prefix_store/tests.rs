//! The tree's rules over fake pages: a page is the ids it holds, 10 bytes
//! a position, so a hit's pages laid end to end must spell the prompt.

use super::{Paged, PrefixStore, Source, PAGE};

struct FakePage(Vec<u32>);

impl Paged for FakePage {
    fn bytes(&self) -> usize {
        10 * self.0.len()
    }
}

/// A cache of `ids`, every position shareable.
struct Fake {
    ids: Vec<u32>,
    any_cut: bool,
}

impl Source for Fake {
    type Page = FakePage;
    fn ids(&self) -> &[u32] {
        &self.ids
    }
    fn shareable_len(&self) -> usize {
        self.ids.len()
    }
    fn any_cut(&self) -> bool {
        self.any_cut
    }
    fn page(&self, start: usize, end: usize) -> Option<FakePage> {
        Some(FakePage(self.ids.get(start..end)?.to_vec()))
    }
}

fn fake(ids: Vec<u32>) -> Fake {
    Fake { ids, any_cut: true }
}

/// `n` ids from `first`.
fn run(first: u32, n: usize) -> Vec<u32> {
    (first..first + n as u32).collect()
}

fn cat(a: &[u32], b: &[u32]) -> Vec<u32> {
    [a, b].concat()
}

/// The ids a hit for `prompt` gives, checked against the prompt.
fn hit(store: &PrefixStore<FakePage>, prompt: &[u32]) -> usize {
    let Some(h) = store.best(prompt) else {
        return 0;
    };
    let spelled: Vec<u32> = h.pages.iter().flat_map(|p| p.0.clone()).collect();
    assert!(spelled.len() >= h.n, "the pages hold the hit");
    assert!(
        spelled.len() - h.n < h.pages.last().map_or(0, |p| p.0.len()),
        "no page past the hit"
    );
    assert_eq!(spelled[..h.n], prompt[..h.n], "the pages spell the prompt");
    assert!(h.n < prompt.len(), "one id left to compute");
    h.n
}

#[test]
fn prefixes_that_begin_alike_share_their_pages() {
    let system = run(1000, 3 * PAGE + 5);
    let mut store = PrefixStore::with_chunk(1 << 20, 128);
    let a = cat(&system, &run(0, 20));
    let b = cat(&system, &run(500, 7));
    assert!(store.keep(&fake(a.clone())));
    assert!(store.keep(&fake(b.clone())));
    // The system prompt is held once: a's and b's pages after it differ.
    assert_eq!(store.bytes(), 10 * (a.len() + b.len() - 3 * PAGE));
    assert_eq!(store.prefixes(), 2);
    // Keeping either again adds nothing.
    assert!(!store.keep(&fake(a.clone())));
    assert!(!store.keep(&fake(system.clone())));
    // A prompt takes all of a stored prefix, or where it parts from them
    // (inside a page too).
    assert_eq!(hit(&store, &cat(&a, &[7])), a.len());
    assert_eq!(hit(&store, &a), a.len() - 1);
    assert_eq!(hit(&store, &cat(&system, &[9, 9])), system.len());
    assert_eq!(hit(&store, &cat(&system[..40], &[9])), 40);
    assert_eq!(hit(&store, &[5, 5, 5]), 0);
}

#[test]
fn a_longer_prefix_replaces_a_short_last_page() {
    let mut store = PrefixStore::with_chunk(1 << 20, 128);
    let short = run(0, PAGE + 3);
    assert!(store.keep(&fake(short.clone())));
    assert_eq!(store.pages(), 2);
    let long = run(0, 3 * PAGE);
    assert!(store.keep(&fake(long.clone())));
    assert_eq!((store.pages(), store.bytes()), (3, 10 * long.len()));
    assert_eq!(store.prefixes(), 1);
    // The short prefix is still served (by the whole pages).
    assert_eq!(hit(&store, &cat(&short, &[99])), short.len());
    assert!(!store.keep(&fake(short)));
}

#[test]
fn evicts_least_recently_used_leaves_within_the_budget() {
    // Room for 6 pages of PAGE positions.
    let budget = 6 * 10 * PAGE;
    let mut store = PrefixStore::with_chunk(budget, 128);
    let root = run(0, PAGE);
    let a = cat(&root, &run(100, 2 * PAGE));
    let b = cat(&root, &run(200, 2 * PAGE));
    assert!(store.keep(&fake(a.clone())));
    assert!(store.keep(&fake(b.clone())));
    assert_eq!(store.pages(), 5);
    // a used: b is now the least recently used.
    store.touch(&a);
    let c = run(300, 2 * PAGE);
    assert!(store.keep(&fake(c.clone())));
    // 7 pages do not fit: b's last page goes, not the root both share.
    assert!(store.bytes() <= budget);
    assert_eq!(hit(&store, &cat(&a, &[1])), a.len());
    assert_eq!(hit(&store, &cat(&b, &[1])), 2 * PAGE);
    assert_eq!(hit(&store, &cat(&c, &[1])), c.len());
    // A prefix larger than the budget keeps its first pages that fit,
    // evicting everything older, leaves first.
    let d = run(400, 10 * PAGE);
    assert!(store.keep(&fake(d.clone())));
    assert_eq!(store.bytes(), budget);
    assert_eq!(hit(&store, &cat(&d, &[1])), 6 * PAGE);
    assert_eq!(hit(&store, &cat(&a, &[1])), 0);
    // Nothing kept with a budget of 0.
    let mut none = PrefixStore::<FakePage>::with_chunk(0, 128);
    assert!(!none.keep(&fake(a)));
    assert_eq!(none.pages(), 0);
}

#[test]
fn pages_from_steps_that_depend_on_the_cut_give_whole_chunks() {
    let chunk = 2 * PAGE;
    let mut store = PrefixStore::with_chunk(1 << 20, chunk);
    let ids = run(0, 3 * chunk);
    store.keep(&Fake {
        ids: ids.clone(),
        any_cut: false,
    });
    assert_eq!(hit(&store, &cat(&ids[..chunk + 5], &[1])), chunk);
    assert_eq!(hit(&store, &cat(&ids, &[1])), ids.len());
    assert_eq!(hit(&store, &ids[..chunk]), 0);
}

#[test]
fn a_hit_keeps_its_pages_alive_after_eviction() {
    let mut store = PrefixStore::with_chunk(3 * 10 * PAGE, 128);
    let a = run(0, 3 * PAGE);
    store.keep(&fake(a.clone()));
    let h = store.best(&cat(&a, &[1])).expect("a hit");
    // Another prefix evicts all of a's pages; the hit still holds them.
    store.keep(&fake(run(500, 3 * PAGE)));
    assert_eq!(hit(&store, &cat(&a, &[1])), 0);
    let spelled: Vec<u32> = h.pages.iter().flat_map(|p| p.0.clone()).collect();
    assert_eq!(spelled, a);
}
