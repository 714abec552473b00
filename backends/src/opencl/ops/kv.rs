//! The KV cache in device memory: each layer's keys and values in one
//! allocation per tensor, `[capacity, hk, d]` rows in the cache's dtype
//! (f32, f16 or q8_0), sized at first to the reserved context (or the rows
//! needed, if more) and doubled, with a device copy of the rows so far,
//! when full. New rows are converted on the device (`attention_kv_store*`
//! of `kernels/attention.cl`: f16 rounded to nearest even as the `half`
//! crate does, q8_0 quantized exactly as `quant::q8_0`), and each append
//! returns views of the first `tokens` rows of the same allocations.

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::Result;
use crate::kv::{DeviceKv, KvCache};
use crate::opencl::{invalid, wrap, Arg, OpenClBackend};
use crate::quant::QuantType;
use crate::tensor::Tensor;

use super::off;

const PROGRAM: &str = "attention";
const OP: &str = "kv_cache";

pub fn append(
    cl: &OpenClBackend,
    cache: &mut KvCache,
    layer: usize,
    k: &Tensor,
    v: &Tensor,
) -> Result<(Tensor, Tensor)> {
    if k.rank() != 3
        || v.rank() != 3
        || k.shape()[0] != v.shape()[0]
        || k.shape()[1] != v.shape()[1]
    {
        return Err(invalid(
            OP,
            format!(
                "keys {:?} and values {:?} must be [seq, kv_heads, dim] with equal seq and heads",
                k.shape(),
                v.shape()
            ),
        ));
    }
    let dtype = cache.dtype();
    let bs = dtype.block_size();
    if !k.shape()[2].is_multiple_of(bs) || !v.shape()[2].is_multiple_of(bs) {
        return Err(invalid(
            OP,
            format!(
                "a {dtype} cache stores heads of whole {bs}-value blocks; keys {:?} / values {:?} do not fit (use --kv-type f16)",
                k.shape(),
                v.shape()
            ),
        ));
    }
    if !matches!(
        dtype,
        DType::F32 | DType::F16 | DType::Quant(QuantType::Q8_0)
    ) {
        return Err(invalid(
            OP,
            format!("a device KV cache cannot store {dtype}"),
        ));
    }
    let (k, v) = (cl.on_device(k)?, cl.on_device(v)?);
    let s = k.shape()[0];
    let (hk, dk, dv) = (k.shape()[1], k.shape()[2], v.shape()[2]);
    let reserved = cache.reserved();
    let slot = cache.device_layer(layer);
    let tokens = slot.as_ref().map_or(0, |l| l.tokens);
    let needed = tokens + s;
    let grow_to = |cap: usize| cap.max(reserved).max(needed);
    match slot {
        Some(l) => {
            if l.k.shape()[1..] != [hk, dk] || l.v.shape()[1..] != [hk, dv] {
                return Err(invalid(
                    OP,
                    format!(
                        "layer {layer} caches rows of {:?}/{:?}, got {:?}/{:?}",
                        &l.k.shape()[1..],
                        &l.v.shape()[1..],
                        [hk, dk],
                        [hk, dv]
                    ),
                ));
            }
            if l.k.dtype() != dtype {
                return Err(invalid(
                    OP,
                    format!("layer {layer} holds {}, the cache {dtype}", l.k.dtype()),
                ));
            }
            let cap = l.k.shape()[0];
            if needed > cap {
                let new_cap = grow_to(cap * 2);
                l.k = regrow(cl, &l.k, new_cap, tokens)?;
                l.v = regrow(cl, &l.v, new_cap, tokens)?;
            }
        }
        None => {
            let cap = grow_to(0);
            let alloc = |d: usize| -> Result<Tensor> {
                let shape = vec![cap, hk, d];
                let bytes = row_bytes(dtype, hk * d)? * cap;
                wrap(cl.ctx.alloc(bytes)?, dtype, shape)
            };
            *slot = Some(DeviceKv {
                k: alloc(dk)?,
                v: alloc(dv)?,
                tokens: 0,
            });
        }
    }
    let l = slot
        .as_mut()
        .ok_or_else(|| invalid(OP, "layer slot vanished"))?;
    store(cl, &k, &l.k, tokens * hk * dk)?;
    store(cl, &v, &l.v, tokens * hk * dv)?;
    l.tokens = needed;
    let view =
        |t: &Tensor, d: usize| Tensor::from_buffer(Arc::clone(t.buffer()), 0, vec![needed, hk, d]);
    Ok((view(&l.k, dk)?, view(&l.v, dv)?))
}

/// Bytes of `n` values of `dtype` (whole blocks).
fn row_bytes(dtype: DType, n: usize) -> Result<usize> {
    Ok(n / dtype.block_size() * dtype.size())
}

/// A new allocation of `cap` rows holding the first `tokens` rows of `old`.
fn regrow(cl: &OpenClBackend, old: &Tensor, cap: usize, tokens: usize) -> Result<Tensor> {
    let (hk, d) = (old.shape()[1], old.shape()[2]);
    let row = row_bytes(old.dtype(), hk * d)?;
    let mem = cl.ctx.alloc(row * cap)?;
    cl.ctx
        .copy(OpenClBackend::mem(old)?, 0, &mem, 0, row * tokens)?;
    wrap(mem, old.dtype(), vec![cap, hk, d])
}

/// Writes all of `x` (f32 or f16 rows) into `dst` from element `at`,
/// converted to `dst`'s dtype.
fn store(cl: &OpenClBackend, x: &Tensor, dst: &Tensor, at: usize) -> Result<()> {
    let xt = match x.dtype() {
        DType::F32 => 0,
        DType::F16 => 1,
        other => return Err(invalid(OP, format!("cannot cache {other} rows"))),
    };
    let n = x.numel();
    if i32::try_from(at + n).is_err() || i32::try_from(x.offset() + n).is_err() {
        return Err(invalid(OP, "the cache is too large for 32-bit indices"));
    }
    let (xm, dm) = (OpenClBackend::mem(x)?, OpenClBackend::mem(dst)?);
    match dst.dtype() {
        DType::Quant(QuantType::Q8_0) => {
            // Two blocks of 32 work-items per group.
            let nblk = n / 32;
            let args = [
                Arg::Mem(xm),
                Arg::I32(xt),
                Arg::I32(off(x)),
                Arg::I32(nblk as i32),
                Arg::Mem(dm),
                Arg::I32(at as i32),
                Arg::Local(64 * 4),
            ];
            cl.ctx.launch(
                PROGRAM,
                "attention_kv_store_q8_0",
                &[32, nblk],
                Some(&[32, 2]),
                &args,
            )
        }
        dt => {
            let args = [
                Arg::Mem(xm),
                Arg::I32(xt),
                Arg::I32(off(x)),
                Arg::I32(n as i32),
                Arg::Mem(dm),
                Arg::I32(i32::from(dt == DType::F16)),
                Arg::I32(at as i32),
            ];
            cl.ctx
                .launch(PROGRAM, "attention_kv_store", &[n], Some(&[64]), &args)
        }
    }
}
