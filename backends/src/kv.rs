//! The KV cache: per layer, keys and values of every position seen so far,
//! token-major (`[tokens, kv_heads, head_dim]`), so appending extends one
//! buffer and the whole history is a zero-copy view of its prefix. Eager
//! executors and compiled graphs append to the same cache, so a prompt
//! computed one way can be continued the other.

use std::sync::Arc;

use crate::tensor::{Buffer, Tensor};

#[derive(Default)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
}

struct LayerKv {
    k: Arc<Buffer>,
    v: Arc<Buffer>,
    tokens: usize,
    k_row: [usize; 2],
    v_row: [usize; 2],
}

impl KvCache {
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// Positions held by layer `layer` (0 before its first append).
    pub fn len(&self, layer: usize) -> usize {
        self.layers
            .get(layer)
            .and_then(|l| l.as_ref())
            .map_or(0, |l| l.tokens)
    }

    pub fn is_empty(&self) -> bool {
        self.len(0) == 0
    }

    /// Drops every position from `tokens` on (to rewind a conversation).
    pub fn truncate(&mut self, tokens: usize) {
        for l in self.layers.iter_mut().flatten() {
            if tokens < l.tokens {
                let (kr, vr) = (l.k_row[0] * l.k_row[1], l.v_row[0] * l.v_row[1]);
                if let Buffer::F32(k) = Arc::make_mut(&mut l.k) {
                    k.truncate(tokens * kr);
                }
                if let Buffer::F32(v) = Arc::make_mut(&mut l.v) {
                    v.truncate(tokens * vr);
                }
                l.tokens = tokens;
            }
        }
    }

    /// Appends `k [s, hk, dk]` and `v [s, hk, dv]` to layer `layer`; returns
    /// all keys and values held so far.
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
            k: Arc::new(Buffer::F32(Vec::new())),
            v: Arc::new(Buffer::F32(Vec::new())),
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
        // make_mut copies only if a previous view is still alive.
        if let Buffer::F32(buf) = Arc::make_mut(&mut l.k) {
            buf.extend_from_slice(ks);
        }
        if let Buffer::F32(buf) = Arc::make_mut(&mut l.v) {
            buf.extend_from_slice(vs);
        }
        l.tokens += k.shape()[0];
        let kt = Tensor::from_buffer(l.k.clone(), 0, vec![l.tokens, k_row[0], k_row[1]])
            .map_err(|e| e.to_string())?;
        let vt = Tensor::from_buffer(l.v.clone(), 0, vec![l.tokens, v_row[0], v_row[1]])
            .map_err(|e| e.to_string())?;
        Ok((kt, vt))
    }
}
