//! OpenCL launchers for the `attention` family (program
//! `kernels/attention.cl`): `sdpa` and `cached_sdpa`, over f32, f16 or q8_0
//! keys and values. Many query rows run the tiled online-softmax kernel
//! (`attention_flash`); a few (decode) run the split-K pair
//! (`attention_decode` then `attention_combine`). `cached_sdpa` reads its
//! past length on the device, so the host never waits for it.

use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::opencl::{invalid, Arg, ClMem, OpenClBackend};
use crate::quant::QuantType;
use crate::tensor::Tensor;

use super::off;

const PROGRAM: &str = "attention";

/// Work-items per group (a power of two: the decode kernel's trees).
const GROUP: usize = 64;
/// Local memory a work-group may use: 32 KiB, what Adreno and Mali offer,
/// or less where the device has less.
const LOCAL_BUDGET: usize = 32 * 1024;
/// Rows (query x head of a group) at or below which the split-K decode
/// kernel runs (its private accumulators: `DECODE_ROWS` in attention.cl).
const DECODE_ROWS: usize = 8;

/// Sliding windows have no kernel yet: `supports` says no, and the
/// executor's fallback policy decides (`crate::fallback`).
pub fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::Sdpa { window: 0, .. } | Op::CachedSdpa { window: 0, .. }
    )
}

/// The kernels' code for a key / value dtype (`WT_*` of common.cl).
fn kv_code(t: &Tensor) -> Result<i32> {
    match t.dtype() {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::Quant(QuantType::Q8_0) => Ok(4),
        other => Err(invalid(
            "sdpa",
            format!("keys and values cannot be {other}"),
        )),
    }
}

/// One source of key or value rows.
struct Rows<'a> {
    mem: &'a ClMem,
    code: i32,
    off: i32,
}

impl<'a> Rows<'a> {
    fn of(t: &'a Tensor) -> Result<Rows<'a>> {
        Ok(Rows {
            mem: OpenClBackend::mem(t)?,
            code: kv_code(t)?,
            off: off(t),
        })
    }

    fn args(&self) -> [Arg<'a>; 3] {
        [Arg::Mem(self.mem), Arg::I32(self.code), Arg::I32(self.off)]
    }
}

fn group_size(cl: &OpenClBackend) -> usize {
    let mut g = GROUP;
    while g > cl.ctx.info.max_work_group.max(1) {
        g /= 2;
    }
    g
}

fn local_budget(cl: &OpenClBackend) -> usize {
    let dev = cl.ctx.info.device.local_mem_size().unwrap_or(16 * 1024) as usize;
    // Leave room for what the compiler itself puts in local memory.
    dev.min(LOCAL_BUDGET).saturating_sub(256)
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    let (causal, scale) = match op {
        Op::Sdpa { causal, scale, .. } | Op::CachedSdpa { causal, scale, .. } => (*causal, *scale),
        _ => return Err(invalid("opencl", format!("no kernel for {}", op.name()))),
    };
    let (q, k, v) = (x[0], x[1], x[2]);
    // Past rows (cached) or none: the new keys double as the unused past.
    let (kp, vp, plen, cap) = match op {
        Op::CachedSdpa { .. } => (x[3], x[4], Some(x[5]), x[3].shape()[0]),
        _ => (k, v, None, 0),
    };
    let y = cl.empty(out)?;
    let (sq, hq, d) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (sn, hk, dv) = (k.shape()[0], k.shape()[1], v.shape()[2]);
    if out.numel() == 0 {
        return Ok(y);
    }
    for t in x {
        if i32::try_from(t.offset() + t.numel()).is_err() {
            return Err(invalid(
                op.name(),
                format!("{:?} is too large for 32-bit indices", t.shape()),
            ));
        }
    }
    let group = hq / hk;
    let rows = sq * group;
    let wg = group_size(cl);
    let budget = local_budget(cl);
    let (qm, ym) = (OpenClBackend::mem(q)?, OpenClBackend::mem(&y)?);
    let (kpr, knr, vpr, vnr) = (Rows::of(kp)?, Rows::of(k)?, Rows::of(vp)?, Rows::of(v)?);
    let plen_mem = match plen {
        Some(t) => OpenClBackend::mem(t)?,
        None => knr.mem, // never read (use_plen = 0)
    };
    let mut args: Vec<Arg> = vec![Arg::Mem(qm), Arg::I32(off(q))];
    args.extend(kpr.args());
    args.extend(knr.args());
    args.extend(vpr.args());
    args.extend(vnr.args());
    let i = |n: usize| Arg::I32(n as i32);
    args.extend([
        Arg::Mem(plen_mem),
        Arg::I32(i32::from(plen.is_some())),
        i(cap),
        i(sn),
        i(sq),
        i(hq),
        i(hk),
        i(d),
        i(dv),
        Arg::I32(i32::from(causal)),
        Arg::F32(scale),
    ]);
    // Keys at most (the past length is only known on the device).
    let sk_max = cap + sn;
    let f = 4; // bytes per float
    if rows <= DECODE_ROWS && (rows * d + wg) * f + rows * 64 * f <= budget {
        // Chunks of keys per work-group: long contexts in 256-key chunks,
        // short ones in 64 for more groups, within local memory.
        let mut chunk = if sk_max > 1024 { 256 } else { 64 };
        while chunk > 64 && (rows * d + rows * chunk + wg) * f > budget {
            chunk /= 2;
        }
        let nsplit = sk_max.div_ceil(chunk).max(1);
        let part = cl.ctx.alloc(nsplit * hk * rows * (2 + dv) * f)?;
        args.extend([
            i(chunk),
            Arg::Mem(&part),
            Arg::Local(rows * d * f),
            Arg::Local(rows * chunk * f),
            Arg::Local(wg * f),
        ]);
        cl.ctx.launch(
            PROGRAM,
            "attention_decode",
            &[nsplit * wg, hk],
            Some(&[wg, 1]),
            &args,
        )?;
        let cargs = [
            Arg::Mem(&part),
            i(nsplit),
            i(sq),
            i(hq),
            i(hk),
            i(dv),
            Arg::Mem(ym),
        ];
        cl.ctx
            .launch(PROGRAM, "attention_combine", &[dv, rows, hk], None, &cargs)?;
        return Ok(y);
    }
    let (bq, bk) = flash_tiles(rows, d, dv, budget).ok_or_else(|| {
        invalid(
            op.name(),
            format!("head dims {d}/{dv} exceed the device's local memory"),
        )
    })?;
    args.extend([
        i(bq),
        i(bk),
        Arg::Mem(ym),
        Arg::Local(bq * d * f),
        Arg::Local(bk * (d + 1) * f),
        Arg::Local(bk * dv * f),
        Arg::Local(bq * bk * f),
        Arg::Local(bq * dv * f),
        Arg::Local(3 * bq * f),
    ]);
    let blocks = rows.div_ceil(bq);
    cl.ctx.launch(
        PROGRAM,
        "attention_flash",
        &[blocks * wg, hk],
        Some(&[wg, 1]),
        &args,
    )?;
    Ok(y)
}

/// `(BQ, BK)` of the flash kernel: 16 x 32 where it fits (fewer rows when
/// there are fewer), halving BK then BQ until the tiles fit `budget`.
fn flash_tiles(rows: usize, d: usize, dv: usize, budget: usize) -> Option<(usize, usize)> {
    let bytes =
        |bq: usize, bk: usize| 4 * (bq * d + bk * (d + 1) + bk * dv + bq * bk + bq * dv + 3 * bq);
    let (mut bq, mut bk) = (rows.next_power_of_two().min(16), 32);
    while bytes(bq, bk) > budget {
        if bk > 8 || (bk > 1 && bq == 1) {
            bk /= 2;
        } else if bq > 1 {
            bq /= 2;
        } else {
            return None;
        }
    }
    Some((bq, bk))
}

#[cfg(test)]
mod tests {
    use super::flash_tiles;

    #[test]
    fn flash_tiles_fit_the_budget() {
        assert_eq!(flash_tiles(64, 64, 64, 32 * 1024 - 256), Some((16, 32)));
        let (bq, bk) = flash_tiles(64, 128, 128, 32 * 1024 - 256).expect("fits");
        assert!(bq >= 8 && bk >= 8, "{bq} {bk}");
        assert_eq!(flash_tiles(3, 64, 64, 32 * 1024).map(|t| t.0), Some(4));
        assert!(flash_tiles(16, 1 << 16, 64, 32 * 1024).is_none());
    }
}
