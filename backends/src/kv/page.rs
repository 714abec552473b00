//! Pages of a KV cache: a copy of some consecutive positions of every
//! layer's keys and values, so a server's prefix store keeps a prompt
//! prefix as fixed-size pages that several prefixes share (issue #31), and
//! a slot's cache is assembled from them (`KvCache::from_pages`) instead of
//! computed. A page holds host rows only: caches in device memory or with
//! a recurrent state cannot be cut into pages.

use std::sync::Arc;

use super::{KvCache, LayerKv, Store};
use crate::dtype::DType;
use crate::tensor::{Buffer, OwnedBytes};

/// Consecutive positions of every layer of one cache.
pub struct KvPage {
    dtype: DType,
    tokens: usize,
    /// By layer: keys, values and their row shapes (None: a layer the
    /// cache did not hold).
    layers: Vec<Option<LayerKv>>,
}

impl Store {
    /// A copy of values `[a, b)`.
    pub(super) fn range(&self, dtype: DType, a: usize, b: usize) -> Store {
        match self {
            Store::Float(buf) => Store::Float(Arc::new(match &**buf {
                Buffer::F16(v) => Buffer::F16(v[a.min(v.len())..b.min(v.len())].to_vec()),
                Buffer::F32(v) => Buffer::F32(v[a.min(v.len())..b.min(v.len())].to_vec()),
                _ => Buffer::F32(vec![]),
            })),
            Store::Blocks(bytes) => {
                let at = |e: usize| (e / dtype.block_size() * dtype.size()).min(bytes.0.len());
                Store::Blocks(Arc::new(OwnedBytes(bytes.0[at(a)..at(b)].to_vec())))
            }
        }
    }

    /// Appends the first `elems` values of `other` (same dtype).
    fn append_from(&mut self, dtype: DType, other: &Store, elems: usize) -> Result<(), String> {
        match (self, other) {
            (Store::Float(to), Store::Float(from)) => match (Arc::make_mut(to), &**from) {
                (Buffer::F32(t), Buffer::F32(f)) => t.extend_from_slice(&f[..elems.min(f.len())]),
                (Buffer::F16(t), Buffer::F16(f)) => t.extend_from_slice(&f[..elems.min(f.len())]),
                _ => return Err("pages of another dtype".into()),
            },
            (Store::Blocks(to), Store::Blocks(from)) => {
                let n = (elems / dtype.block_size() * dtype.size()).min(from.0.len());
                Arc::make_mut(to).0.extend_from_slice(&from.0[..n]);
            }
            _ => return Err("pages of another dtype".into()),
        }
        Ok(())
    }
}

impl KvPage {
    /// Positions the page holds.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Bytes its rows take.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.k.bytes() + l.v.bytes())
            .sum()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

impl KvCache {
    /// A copy of positions `[start, end)` of every layer; None for a cache
    /// in device memory or with a recurrent state, or where a layer holds
    /// fewer than `end` positions.
    pub fn page(&self, start: usize, end: usize) -> Option<KvPage> {
        if start > end
            || self.device.iter().any(Option::is_some)
            || self.states.iter().any(Option::is_some)
        {
            return None;
        }
        let dtype = self.dtype;
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in &self.layers {
            let Some(l) = l else {
                layers.push(None);
                continue;
            };
            if l.tokens < end {
                return None;
            }
            let (kr, vr) = (l.k_row[0] * l.k_row[1], l.v_row[0] * l.v_row[1]);
            layers.push(Some(LayerKv {
                k: l.k.range(dtype, start * kr, end * kr),
                v: l.v.range(dtype, start * vr, end * vr),
                tokens: end - start,
                k_row: l.k_row,
                v_row: l.v_row,
            }));
        }
        Some(KvPage {
            dtype,
            tokens: end - start,
            layers,
        })
    }

    /// A cache holding the first `tokens` positions of `pages` laid end to
    /// end (the last page may be cut); None where the pages do not hold
    /// that many or do not fit together (dtype, layers, row shapes).
    pub fn from_pages(pages: &[&KvPage], tokens: usize) -> Option<KvCache> {
        let first = pages.first()?;
        let dtype = first.dtype;
        // Pages of one cache hold the same layers.
        if pages.iter().map(|p| p.tokens).sum::<usize>() < tokens
            || pages.iter().any(|p| p.layers.len() != first.layers.len())
        {
            return None;
        }
        let mut cache = KvCache::with_dtype(dtype).ok()?;
        for (i, l0) in first.layers.iter().enumerate() {
            let Some(l0) = l0 else {
                cache.layers.push(None);
                continue;
            };
            let (kr, vr) = (l0.k_row[0] * l0.k_row[1], l0.v_row[0] * l0.v_row[1]);
            let mut layer = LayerKv {
                k: Store::new(dtype),
                v: Store::new(dtype),
                tokens: 0,
                k_row: l0.k_row,
                v_row: l0.v_row,
            };
            for p in pages {
                let left = tokens - layer.tokens;
                if left == 0 {
                    break;
                }
                let l = p.layers.get(i)?.as_ref()?;
                if p.dtype != dtype || l.k_row != l0.k_row || l.v_row != l0.v_row {
                    return None;
                }
                let n = left.min(l.tokens);
                layer.k.append_from(dtype, &l.k, n * kr).ok()?;
                layer.v.append_from(dtype, &l.v, n * vr).ok()?;
                layer.tokens += n;
            }
            cache.layers.push(Some(layer));
        }
        Some(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantType;
    use crate::tensor::Tensor;

    #[test]
    fn pages_laid_end_to_end_equal_the_cache_they_were_cut_from() {
        let rows = 7;
        let k: Vec<f32> = (0..rows * 2 * 32)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let v: Vec<f32> = (0..rows * 2 * 32)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        for dtype in [DType::F32, DType::F16, DType::Quant(QuantType::Q8_0)] {
            let mut c = KvCache::with_dtype(dtype).expect("dtype");
            let kt = Tensor::from_f32(k.clone(), vec![rows, 2, 32]).expect("k");
            let vt = Tensor::from_f32(v.clone(), vec![rows, 2, 32]).expect("v");
            c.append(0, &kt, &vt).expect("append");
            c.append(2, &kt, &vt).expect("append");
            let pages: Vec<KvPage> = [(0, 3), (3, 6), (6, 7)]
                .iter()
                .map(|&(a, b)| c.page(a, b).expect("a host cache"))
                .collect();
            assert_eq!(pages[1].tokens(), 3);
            assert!(pages[0].bytes() > 0);
            let refs: Vec<&KvPage> = pages.iter().collect();
            for n in [1, 3, 5, 7] {
                let mut a = KvCache::from_pages(&refs, n).expect("assembled");
                let mut b = c.share_prefix(n).expect("a prefix");
                assert_eq!((a.len(0), a.len(1), a.len(2)), (n, 0, n), "{dtype}");
                assert_eq!(a.bytes(), b.bytes(), "{dtype} {n}");
                // Both grow alike: the same rows, bit for bit.
                for layer in [0, 2] {
                    let (ka, va) = a.append(layer, &kt, &vt).expect("append");
                    let (kb, vb) = b.append(layer, &kt, &vt).expect("append");
                    assert_eq!(ka.to_f32_vec().ok(), kb.to_f32_vec().ok(), "{dtype} {n}");
                    assert_eq!(va.to_f32_vec().ok(), vb.to_f32_vec().ok(), "{dtype} {n}");
                }
            }
            assert!(
                KvCache::from_pages(&refs, 8).is_none(),
                "more than the pages hold"
            );
            assert!(c.page(5, 8).is_none(), "past the cache");
        }
        // Pages of another dtype do not fit together.
        let kt = Tensor::from_f32(k[..64].to_vec(), vec![1, 2, 32]).expect("k");
        let mut a = KvCache::new();
        let mut b = KvCache::with_dtype(DType::F16).expect("f16");
        a.append(0, &kt, &kt).expect("append");
        b.append(0, &kt, &kt).expect("append");
        let (pa, pb) = (a.page(0, 1).expect("page"), b.page(0, 1).expect("page"));
        assert!(KvCache::from_pages(&[&pa, &pb], 2).is_none());
        // A recurrent state cannot be paged.
        let mut s = KvCache::new();
        s.set_state(0, vec![kt], 1).expect("state");
        assert!(s.page(0, 1).is_none());
    }
}
