//! The KV cache: per layer, keys and values of every position seen so far,
//! token-major (`[tokens, kv_heads, head_dim]`), so appending extends one
//! buffer and the whole history is a zero-copy view of its prefix. Eager
//! executors and compiled graphs append to the same cache, so a prompt
//! computed one way can be continued the other.
//!
//! The cache stores f32, f16 or q8_0 (`KvCache::with_dtype`): f16 halves its
//! memory, q8_0 (blocks of 32 values along each head's dim, as llama.cpp's
//! `-ctk q8_0`) takes 34/128 of f32's. Attention reads the stored rows
//! directly (`cpu::attention::Rows`), widening one row at a time.
//!
//! A recurrent layer (Gated DeltaNet) keeps no rows but a fixed-size state
//! (`set_state`), replaced on each call. A state summarizes every position
//! seen and cannot be rewound: `truncate` below what a state covers empties
//! the whole cache, and says so, so the caller recomputes from the start.
//! What can be done is to keep the states as they are now
//! (`snapshot_states`, cheap: states are replaced, never written in place)
//! and put them back with the rows cut to the same position
//! (`restore_states`): speculative decoding's way back.

mod page;

use std::sync::Arc;

use half::f16;

pub use page::KvPage;

use crate::dtype::DType;
use crate::quant::{self, QuantType};
use crate::tensor::{Buffer, ByteOwner, OwnedBytes, Tensor};

/// The dtypes a cache can store, by the names `--kv-type` takes.
pub const KV_DTYPES: &[&str] = &["f32", "f16", "q8_0"];

pub struct KvCache {
    dtype: DType,
    layers: Vec<Option<LayerKv>>,
    /// Positions each layer's buffers are sized for when they grow (the
    /// context a compiled graph was captured for), so that appends up to
    /// it never reallocate and copy the history.
    reserve: usize,
    /// Layers a device backend keeps in its own memory (see `DeviceKv`).
    device: Vec<Option<DeviceKv>>,
    /// Recurrent layers' states, by layer.
    states: Vec<Option<LayerState>>,
}

/// The recurrent states of a cache at one position (`snapshot_states`).
#[derive(Clone)]
pub struct StateSnapshot {
    states: Vec<Option<LayerState>>,
    tokens: usize,
}

impl StateSnapshot {
    /// The positions the states cover.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

/// One recurrent layer's state tensors (as its script packs them) and the
/// positions they cover.
#[derive(Clone)]
struct LayerState {
    tensors: Vec<Tensor>,
    tokens: usize,
}

/// One layer's keys and values in device memory, owned by the backend that
/// appends to it (`Backend::kv_append`): `k [capacity, hk, dk]` and `v`
/// allocations of which the first `tokens` rows hold positions. Appends
/// write rows past `tokens`, so views of earlier prefixes stay valid.
#[derive(Clone)]
pub struct DeviceKv {
    pub k: Tensor,
    pub v: Tensor,
    pub tokens: usize,
}

impl Default for KvCache {
    fn default() -> KvCache {
        KvCache::new()
    }
}

/// One growing store of rows.
#[derive(Clone)]
enum Store {
    Float(Arc<Buffer>),
    Blocks(Arc<OwnedBytes>),
}

struct LayerKv {
    k: Store,
    v: Store,
    tokens: usize,
    k_row: [usize; 2],
    v_row: [usize; 2],
}

impl Store {
    fn new(dtype: DType) -> Store {
        match dtype {
            DType::F16 => Store::Float(Arc::new(Buffer::F16(vec![]))),
            DType::Quant(_) => Store::Blocks(Arc::new(OwnedBytes(vec![]))),
            _ => Store::Float(Arc::new(Buffer::F32(vec![]))),
        }
    }

    /// Appends rows (copies only if an earlier view is still alive); when
    /// the buffer must grow it grows to at least `cap` values at once.
    fn extend(&mut self, dtype: DType, values: &[f32], cap: usize) -> Result<(), String> {
        fn grow<T>(v: &mut Vec<T>, extra: usize, cap: usize) {
            if v.capacity() < v.len() + extra {
                v.reserve(cap.max(v.len() + extra) - v.len());
            }
        }
        match self {
            Store::Float(b) => match Arc::make_mut(b) {
                Buffer::F32(v) => {
                    grow(v, values.len(), cap);
                    v.extend_from_slice(values)
                }
                Buffer::F16(v) => {
                    grow(v, values.len(), cap);
                    // The slice conversion runs F16C 8 values at a time;
                    // `f16::from_f32` per value was a call per value (~3%
                    // of a 1-thread prefill).
                    let old = v.len();
                    v.resize(old + values.len(), f16::ZERO);
                    half::slice::HalfFloatSliceExt::convert_from_f32_slice(&mut v[old..], values);
                }
                _ => return Err("unexpected cache storage".into()),
            },
            Store::Blocks(b) => {
                let ty = dtype.quant().ok_or("unexpected cache dtype")?;
                let v = &mut Arc::make_mut(b).0;
                let old = v.len();
                let added = values.len() / ty.block_size() * ty.type_size();
                grow(v, added, cap / ty.block_size() * ty.type_size());
                v.resize(old + added, 0);
                quant::quantize_into(ty, values, &mut v[old..])?;
            }
        }
        Ok(())
    }

    /// Keeps the first `elems` values.
    fn truncate(&mut self, dtype: DType, elems: usize) {
        match self {
            Store::Float(b) => match Arc::make_mut(b) {
                Buffer::F32(v) => v.truncate(elems),
                Buffer::F16(v) => v.truncate(elems),
                _ => {}
            },
            Store::Blocks(b) => {
                let bytes = elems / dtype.block_size() * dtype.size();
                Arc::make_mut(b).0.truncate(bytes);
            }
        }
    }

    /// A new store holding a copy of the first `elems` values.
    fn prefix(&self, dtype: DType, elems: usize) -> Store {
        self.range(dtype, 0, elems)
    }

    fn bytes(&self) -> usize {
        match self {
            Store::Float(b) => b.len() * b.dtype().size(),
            Store::Blocks(b) => b.0.len(),
        }
    }

    fn view(&self, dtype: DType, shape: Vec<usize>) -> Result<Tensor, String> {
        match self {
            Store::Float(b) => Tensor::from_buffer(b.clone(), 0, shape),
            Store::Blocks(b) => {
                let len = dtype
                    .storage_bytes(&shape)
                    .ok_or("cache rows are not whole blocks")?;
                let owner: Arc<dyn ByteOwner> = b.clone();
                Tensor::from_bytes(owner, 0, len, dtype, shape)
            }
        }
        .map_err(|e| e.to_string())
    }
}

impl KvCache {
    /// An f32 cache.
    pub fn new() -> KvCache {
        KvCache {
            dtype: DType::F32,
            layers: vec![],
            reserve: 0,
            device: vec![],
            states: vec![],
        }
    }

    /// Sizes each layer's buffers for `tokens` positions when they next
    /// grow (memory is committed as rows are written).
    pub fn reserve(&mut self, tokens: usize) {
        self.reserve = self.reserve.max(tokens);
    }

    /// A cache storing `dtype`: f32, f16 or q8_0.
    pub fn with_dtype(dtype: DType) -> Result<KvCache, String> {
        match dtype {
            DType::F32 | DType::F16 | DType::Quant(QuantType::Q8_0) => Ok(KvCache {
                dtype,
                layers: vec![],
                reserve: 0,
                device: vec![],
                states: vec![],
            }),
            other => Err(format!(
                "a KV cache stores {}, not {other}",
                KV_DTYPES.join(", ")
            )),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Positions held by layer `layer` (0 before its first append).
    pub fn len(&self, layer: usize) -> usize {
        if let Some(Some(s)) = self.states.get(layer) {
            return s.tokens;
        }
        if let Some(Some(d)) = self.device.get(layer) {
            return d.tokens;
        }
        self.layers
            .get(layer)
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.tokens)
    }

    /// Positions the next growth of a layer should make room for.
    pub fn reserved(&self) -> usize {
        self.reserve
    }

    /// Layer `layer` as a device backend keeps it (`None` until its first
    /// device append); the slot is created on request.
    pub fn device_layer(&mut self, layer: usize) -> &mut Option<DeviceKv> {
        if self.device.len() <= layer {
            self.device.resize_with(layer + 1, || None);
        }
        &mut self.device[layer]
    }

    pub fn is_empty(&self) -> bool {
        self.len(0) == 0
    }

    /// Bytes the cache holds, all layers.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.k.bytes() + l.v.bytes())
            .sum::<usize>()
            + self
                .device
                .iter()
                .flatten()
                .map(|d| {
                    (d.k.numel() + d.v.numel()) / d.k.dtype().block_size() * d.k.dtype().size()
                })
                .sum::<usize>()
            + self
                .states
                .iter()
                .flatten()
                .flat_map(|s| &s.tensors)
                .map(|t| t.numel() * t.dtype().size() / t.dtype().block_size())
                .sum::<usize>()
    }

    /// Drops every position from `tokens` on (to rewind a conversation) and
    /// returns how many positions the cache keeps: `tokens`, or 0 when a
    /// recurrent layer's state covers more than `tokens` positions (a state
    /// cannot be rewound, so the whole cache is emptied and the caller must
    /// recompute from the start).
    pub fn truncate(&mut self, tokens: usize) -> usize {
        let rewinds_state = self.states.iter().flatten().any(|s| s.tokens > tokens);
        if rewinds_state {
            self.states.clear();
            self.layers.clear();
            self.device.clear();
            return 0;
        }
        for d in self.device.iter_mut().flatten() {
            d.tokens = d.tokens.min(tokens);
        }
        let dtype = self.dtype;
        for l in self.layers.iter_mut().flatten() {
            if tokens < l.tokens {
                let (kr, vr) = (l.k_row[0] * l.k_row[1], l.v_row[0] * l.v_row[1]);
                l.k.truncate(dtype, tokens * kr);
                l.v.truncate(dtype, tokens * vr);
                l.tokens = tokens;
            }
        }
        tokens
    }

    /// A new cache holding a copy of this one's first `tokens` positions
    /// (another sequence starting with the same tokens: a server's prefix
    /// shared between slots). None for a cache in device memory or with a
    /// recurrent state, which cannot be cut at an arbitrary position.
    pub fn share_prefix(&self, tokens: usize) -> Option<KvCache> {
        if self.device.iter().any(Option::is_some) || self.states.iter().any(Option::is_some) {
            return None;
        }
        let dtype = self.dtype;
        let layers = self
            .layers
            .iter()
            .map(|l| {
                l.as_ref().map(|l| {
                    let n = tokens.min(l.tokens);
                    let (kr, vr) = (l.k_row[0] * l.k_row[1], l.v_row[0] * l.v_row[1]);
                    LayerKv {
                        k: l.k.prefix(dtype, n * kr),
                        v: l.v.prefix(dtype, n * vr),
                        tokens: n,
                        k_row: l.k_row,
                        v_row: l.v_row,
                    }
                })
            })
            .collect();
        Some(KvCache {
            dtype,
            layers,
            reserve: self.reserve,
            device: vec![],
            states: vec![],
        })
    }

    /// The recurrent layers' states as they are now, when they all cover
    /// the same `tokens` positions (None without a state): what
    /// `restore_states` puts back. A step replaces a state's tensors
    /// rather than writing into them, so the snapshot shares them.
    pub fn snapshot_states(&self) -> Option<StateSnapshot> {
        let mut held = self.states.iter().flatten().map(|s| s.tokens);
        let tokens = held.next()?;
        if held.any(|t| t != tokens) {
            return None;
        }
        Some(StateSnapshot {
            states: self.states.clone(),
            tokens,
        })
    }

    /// Back to `snap`: every layer's rows cut to the positions the
    /// snapshot's states cover, and those states in place of the present
    /// ones. False (nothing changed) when the rows hold fewer positions
    /// than that (the snapshot is of a later point, or of another cache).
    pub fn restore_states(&mut self, snap: StateSnapshot) -> bool {
        let tokens = snap.tokens;
        let short = self.layers.iter().flatten().any(|l| l.tokens < tokens)
            || self.device.iter().flatten().any(|d| d.tokens < tokens)
            || self.states.iter().flatten().any(|s| s.tokens < tokens);
        if short {
            return false;
        }
        // The states first: with none covering more than `tokens`,
        // `truncate` cuts the rows and keeps them.
        self.states = snap.states;
        self.truncate(tokens) == tokens
    }

    /// Keeps the first `tokens` positions of a cache whose recurrent
    /// layers' states after position `tokens - 1` are `states` (one entry
    /// per recurrent layer, in layer order: what a verification step kept
    /// of each row): rows cut, those states in place. False (nothing
    /// changed) where the states do not match the layers (count, tensor
    /// count and shapes) or a layer holds fewer positions.
    pub fn rewind_to_states(&mut self, tokens: usize, states: Vec<Vec<Tensor>>) -> bool {
        let held: Vec<usize> = (0..self.states.len())
            .filter(|&l| self.states[l].is_some())
            .collect();
        if held.len() != states.len() {
            return false;
        }
        for (&l, new) in held.iter().zip(&states) {
            let Some(old) = &self.states[l] else {
                return false;
            };
            let same = old.tensors.len() == new.len()
                && old
                    .tensors
                    .iter()
                    .zip(new)
                    .all(|(a, b)| a.shape() == b.shape() && a.dtype() == b.dtype());
            if !same || old.tokens < tokens {
                return false;
            }
        }
        if self.layers.iter().flatten().any(|l| l.tokens < tokens)
            || self.device.iter().flatten().any(|d| d.tokens < tokens)
        {
            return false;
        }
        for (l, new) in held.into_iter().zip(states) {
            self.states[l] = Some(LayerState {
                tensors: new,
                tokens,
            });
        }
        self.truncate(tokens) == tokens
    }

    /// Whether any layer holds a recurrent state (a model with linear
    /// attention layers, once it has run).
    pub fn has_state(&self) -> bool {
        self.states.iter().any(Option::is_some)
    }

    /// The state tensors of recurrent layer `layer`, `None` before its
    /// first `set_state`.
    pub fn state(&self, layer: usize) -> Option<&[Tensor]> {
        self.states.get(layer)?.as_ref().map(|s| &s.tensors[..])
    }

    /// Replaces recurrent layer `layer`'s state with `tensors`, which
    /// cover `tokens` more positions than the previous state did. A layer
    /// holds either keys and values or a state, not both.
    pub fn set_state(
        &mut self,
        layer: usize,
        tensors: Vec<Tensor>,
        tokens: usize,
    ) -> Result<(), String> {
        if matches!(self.layers.get(layer), Some(Some(_)))
            || matches!(self.device.get(layer), Some(Some(_)))
        {
            return Err(format!(
                "layer {layer} of the cache holds keys and values; it cannot also hold a recurrent state"
            ));
        }
        if self.states.len() <= layer {
            self.states.resize_with(layer + 1, || None);
        }
        let before = self.states[layer].as_ref().map_or(0, |s| s.tokens);
        self.states[layer] = Some(LayerState {
            tensors,
            tokens: before + tokens,
        });
        Ok(())
    }

    /// Appends `k [s, hk, dk]` and `v [s, hk, dv]` to layer `layer`; returns
    /// all keys and values held so far, in the cache's dtype.
    pub fn append(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor), String> {
        if k.rank() != 3
            || v.rank() != 3
            || k.shape()[0] != v.shape()[0]
            || k.shape()[1] != v.shape()[1]
        {
            return Err(format!(
                "keys {:?} and values {:?} must be [seq, kv_heads, dim] with equal seq and heads",
                k.shape(),
                v.shape()
            ));
        }
        let dtype = self.dtype;
        let bs = dtype.block_size();
        if !k.shape()[2].is_multiple_of(bs) || !v.shape()[2].is_multiple_of(bs) {
            return Err(format!(
                "a {dtype} cache stores heads of whole {bs}-value blocks; keys {:?} / values {:?} do not fit (use --kv-type f16)",
                k.shape(),
                v.shape()
            ));
        }
        let (kd, vd) = (
            k.to_f32().map_err(|e| e.to_string())?,
            v.to_f32().map_err(|e| e.to_string())?,
        );
        let (ks, vs) = (
            kd.f32s().map_err(|e| e.to_string())?,
            vd.f32s().map_err(|e| e.to_string())?,
        );
        if self.layers.len() <= layer {
            self.layers.resize_with(layer + 1, || None);
        }
        let k_row = [k.shape()[1], k.shape()[2]];
        let v_row = [v.shape()[1], v.shape()[2]];
        let l = self.layers[layer].get_or_insert_with(|| LayerKv {
            k: Store::new(dtype),
            v: Store::new(dtype),
            tokens: 0,
            k_row,
            v_row,
        });
        if l.k_row != k_row || l.v_row != v_row {
            return Err(format!(
                "layer {layer} caches rows of {:?}/{:?}, got {:?}/{:?}",
                l.k_row, l.v_row, k_row, v_row
            ));
        }
        let cap = self.reserve;
        l.k.extend(dtype, ks, cap * k_row[0] * k_row[1])?;
        l.v.extend(dtype, vs, cap * v_row[0] * v_row[1])?;
        l.tokens += k.shape()[0];
        let kt = l.k.view(dtype, vec![l.tokens, k_row[0], k_row[1]])?;
        let vt = l.v.view(dtype, vec![l.tokens, v_row[0], v_row[1]])?;
        Ok((kt, vt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_appends_truncates_and_round_trips() {
        let k: Vec<f32> = (0..2 * 2 * 32).map(|i| (i as f32 * 0.37).sin()).collect();
        let v: Vec<f32> = (0..2 * 2 * 32).map(|i| (i as f32 * 0.11).cos()).collect();
        for (dtype, tol) in [
            (DType::F32, 0.0),
            (DType::F16, 1e-3),
            (DType::Quant(QuantType::Q8_0), 1e-2),
        ] {
            let mut c = KvCache::with_dtype(dtype).expect("dtype");
            let kt = Tensor::from_f32(k.clone(), vec![2, 2, 32]).expect("k");
            let vt = Tensor::from_f32(v.clone(), vec![2, 2, 32]).expect("v");
            c.append(0, &kt, &vt).expect("append");
            let (ka, va) = c.append(0, &kt, &vt).expect("append");
            assert_eq!((ka.shape(), ka.dtype()), (&[4, 2, 32][..], dtype));
            let back = ka.to_f32_vec().expect("widen");
            let err = back[128..]
                .iter()
                .zip(&k)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err <= tol, "{dtype}: {err}");
            assert_eq!(va.numel(), 4 * 64);
            c.truncate(1);
            assert_eq!(c.len(0), 1);
            let (ka, _) = c.append(0, &kt, &vt).expect("append");
            assert_eq!(ka.shape()[0], 3);
            assert!(c.bytes() > 0);
        }
        assert!(KvCache::with_dtype(DType::BF16).is_err());
    }

    #[test]
    fn a_shared_prefix_is_a_copy_of_the_first_positions() {
        let k: Vec<f32> = (0..3 * 2 * 32).map(|i| (i as f32 * 0.37).sin()).collect();
        for dtype in [DType::F32, DType::F16, DType::Quant(QuantType::Q8_0)] {
            let mut c = KvCache::with_dtype(dtype).expect("dtype");
            let kt = Tensor::from_f32(k.clone(), vec![3, 2, 32]).expect("k");
            c.append(0, &kt, &kt).expect("append");
            c.append(1, &kt, &kt).expect("append");
            let mut p = c.share_prefix(2).expect("host cache");
            assert_eq!((p.len(0), p.len(1)), (2, 2), "{dtype}");
            // The copy grows on its own; the original keeps its rows.
            let (kp, _) = p.append(0, &kt, &kt).expect("append");
            let (ko, _) = c.append(0, &kt, &kt).expect("append");
            let (kp, ko) = (kp.to_f32_vec().expect("f32"), ko.to_f32_vec().expect("f32"));
            assert_eq!(kp.len(), 5 * 64);
            assert_eq!(ko.len(), 6 * 64);
            assert_eq!(kp[..2 * 64], ko[..2 * 64], "{dtype}: the prefix");
            assert_eq!(kp[2 * 64..], ko[3 * 64..], "{dtype}: the rows after it");
        }
        let mut q = KvCache::with_dtype(DType::Quant(QuantType::Q8_0)).expect("q8");
        let odd = Tensor::from_f32(vec![0.0; 12], vec![1, 1, 12]).expect("odd");
        assert!(q
            .append(0, &odd, &odd)
            .unwrap_err()
            .contains("--kv-type f16"));
    }

    #[test]
    fn a_recurrent_state_is_replaced_and_never_rewound() {
        let mut c = KvCache::new();
        let s = Tensor::from_f32(vec![1.0; 6], vec![2, 3]).expect("state");
        assert!(c.state(0).is_none());
        c.set_state(0, vec![s.clone()], 5).expect("set");
        c.set_state(0, vec![s.clone(), s.clone()], 1).expect("set");
        assert_eq!((c.len(0), c.state(0).map(|s| s.len())), (6, Some(2)));
        assert!(c.bytes() >= 2 * 6 * 4);
        let kt = Tensor::from_f32(vec![0.0; 4], vec![1, 1, 4]).expect("k");
        c.append(1, &kt, &kt).expect("append");
        assert!(c
            .set_state(1, vec![s], 1)
            .unwrap_err()
            .contains("keys and values"));
        // Exact continuation keeps everything; a rewind empties the cache.
        assert_eq!(c.truncate(6), 6);
        assert_eq!(c.len(0), 6);
        assert_eq!(c.truncate(3), 0);
        assert!(c.state(0).is_none() && c.is_empty() && c.len(1) == 0);
    }

    #[test]
    fn a_snapshot_of_the_states_takes_the_cache_back() {
        let state = |v: f32| Tensor::from_f32(vec![v; 6], vec![2, 3]).expect("state");
        let row = |v: f32| Tensor::from_f32(vec![v; 4], vec![1, 1, 4]).expect("row");
        let mut c = KvCache::new();
        assert!(c.snapshot_states().is_none(), "no state yet");
        // Layer 0 recurrent, layer 1 attention: 3 positions.
        c.set_state(0, vec![state(1.0)], 3).expect("set");
        for v in [1.0, 2.0, 3.0] {
            c.append(1, &row(v), &row(v)).expect("append");
        }
        let snap = c.snapshot_states().expect("a state");
        assert_eq!(snap.tokens(), 3);
        // A verification step of 2 positions, then back.
        c.set_state(0, vec![state(9.0)], 2).expect("set");
        c.append(1, &row(4.0), &row(4.0)).expect("append");
        c.append(1, &row(5.0), &row(5.0)).expect("append");
        assert!(c.restore_states(snap.clone()));
        assert_eq!((c.len(0), c.len(1)), (3, 3));
        let s0 = c.state(0).expect("state")[0].to_f32_vec().expect("f32");
        assert_eq!(s0, vec![1.0; 6], "the snapshot's state is back");
        let (k, _) = c.append(1, &row(6.0), &row(6.0)).expect("append");
        let k = k.to_f32_vec().expect("f32");
        assert_eq!(k[8..12], [3.0; 4]);
        assert_eq!(k[12..], [6.0; 4], "the rows past the snapshot are gone");
        // A snapshot of a later point than the rows hold is refused.
        let mut d = KvCache::new();
        d.set_state(0, vec![state(1.0)], 1).expect("set");
        d.append(1, &row(1.0), &row(1.0)).expect("append");
        assert!(!d.restore_states(snap));
        assert_eq!((d.len(0), d.len(1)), (1, 1), "nothing changed");
    }

    #[test]
    fn a_rows_states_take_the_cache_back_to_that_row() {
        let state = |v: f32| Tensor::from_f32(vec![v; 6], vec![2, 3]).expect("state");
        let row = |v: f32| Tensor::from_f32(vec![v; 4], vec![1, 1, 4]).expect("row");
        let mut c = KvCache::new();
        // Layer 0 attention, layer 1 recurrent: a verification step left 5
        // positions; keep 4 with the states after the 4th.
        for v in 1..=5 {
            c.append(0, &row(v as f32), &row(v as f32)).expect("append");
        }
        c.set_state(1, vec![state(5.0)], 5).expect("set");
        // Mismatched states change nothing: too many layers, another shape,
        // past what the layers hold.
        assert!(!c.rewind_to_states(4, vec![vec![state(4.0)], vec![state(4.0)]]));
        let other = Tensor::from_f32(vec![4.0; 3], vec![3]).expect("t");
        assert!(!c.rewind_to_states(4, vec![vec![other]]));
        assert!(!c.rewind_to_states(6, vec![vec![state(6.0)]]));
        assert_eq!((c.len(0), c.len(1)), (5, 5), "nothing changed");
        assert!(c.rewind_to_states(4, vec![vec![state(4.0)]]));
        assert_eq!((c.len(0), c.len(1)), (4, 4));
        let s = c.state(1).expect("state")[0].to_f32_vec().expect("f32");
        assert_eq!(s, vec![4.0; 6], "the 4th row's state");
        let (k, _) = c.append(0, &row(9.0), &row(9.0)).expect("append");
        assert_eq!(
            k.to_f32_vec().expect("f32")[12..],
            [4.0, 4.0, 4.0, 4.0, 9.0, 9.0, 9.0, 9.0]
        );
    }
}
