//! OpenCL launchers for the `shape` family (program `kernels/shape.cl`):
//! `Reshape` and dim-0 unit-step `Slice` (views, as on the CPU), and the
//! copying layout ops `Permute`, `Concat`, strided `Slice` and
//! `IndexSelect`. Output dtypes follow `Op::infer` (i32 stays i32, floats
//! become f32), so every copy kernel writes 32-bit words and reads its
//! input in one of three modes (see `shape.cl`).

use crate::dtype::DType;
use crate::error::Result;
use crate::infer::TensorMeta;
use crate::op::Op;
use crate::opencl::ops::off;
use crate::opencl::{invalid, Arg, OpenClBackend};
use crate::tensor::Tensor;

const PROGRAM: &str = "shape";
/// `SHAPE_MAX_RANK` of `shape.cl`: dims the general permute kernel takes
/// (after size-1 dims are dropped and adjacent ones merged).
const MAX_RANK: usize = 6;
/// `SHAPE_TILE` of `shape.cl`.
const TILE: usize = 16;

pub fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Concat { .. }
            | Op::Slice { .. }
            | Op::IndexSelect { .. }
    )
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    let name = op.name();
    match op {
        // A view, as the CPU's: same buffer and dtype (`infer` keeps it).
        Op::Reshape { .. } => return x[0].reshaped(out.shape.clone()),
        // Whole outer rows stay views of any dtype (`infer` keeps it).
        Op::Slice {
            dim: 0,
            start,
            end,
            step: 1,
        } => return x[0].narrow0(*start, *end),
        _ => {}
    }
    for t in x {
        fits(name, t.offset() + t.numel())?;
    }
    fits(name, out.numel())?;
    if let Op::IndexSelect { dim } = op {
        // Before the empty-output shortcut: the CPU checks every index.
        check_indexes(cl, x[1], x[0].shape()[*dim])?;
    }
    let y = cl.empty(out)?;
    if out.numel() == 0 {
        return Ok(y);
    }
    match op {
        Op::Permute { perm } => permute(cl, x[0], perm, &y)?,
        Op::Concat { dim } => concat(cl, x, *dim, &y)?,
        Op::Slice {
            dim, start, step, ..
        } => slice(cl, x[0], *dim, *start, *step, &y)?,
        Op::IndexSelect { dim } => index_select(cl, x[0], x[1], *dim, &y)?,
        _ => return Err(invalid(name, "not a shape op")),
    }
    Ok(y)
}

/// Kernels index with `int`: every index must stay below `i32::MAX`.
fn fits(op: &'static str, n: usize) -> Result<()> {
    if n > i32::MAX as usize {
        return Err(invalid(
            op,
            format!("{n} elements exceed the kernels' i32 indexing"),
        ));
    }
    Ok(())
}

/// The `mode` of `shape_ld` reading `src` into an `out` tensor: 0 copies
/// 32-bit words, 1 widens f16, 2 converts i32 to f32.
fn mode(src: DType, out: DType) -> Result<i32> {
    match (src, out) {
        (DType::F32, DType::F32) | (DType::I32, DType::I32) => Ok(0),
        (DType::F16, DType::F32) => Ok(1),
        (DType::I32, DType::F32) => Ok(2),
        _ => Err(invalid(
            "opencl",
            format!("no layout kernel reads {src} into {out}"),
        )),
    }
}

/// `(outer, n, inner)` around `dim` (as `cpu::reduce::split_dims`).
fn split(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = shape[..dim].iter().product();
    let inner = shape[dim + 1..].iter().product();
    (outer, shape[dim], inner)
}

/// The permute `perm` of `shape` reduced to its essentials: size-1 dims
/// dropped and runs of input dims that stay adjacent and in order merged.
/// Returns the reduced input shape and permutation (an identity when the
/// permute moves no data).
fn collapse(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    // Drop size-1 dims, renumbering the rest.
    let mut new_index = vec![usize::MAX; shape.len()];
    let mut sizes = vec![];
    for (d, &s) in shape.iter().enumerate() {
        if s != 1 {
            new_index[d] = sizes.len();
            sizes.push(s);
        }
    }
    let p: Vec<usize> = perm
        .iter()
        .filter(|&&d| shape[d] != 1)
        .map(|&d| new_index[d])
        .collect();
    // Groups of consecutive input dims in output order: (first, last).
    let mut groups: Vec<(usize, usize)> = vec![];
    for &d in &p {
        match groups.last_mut() {
            Some(g) if g.1 + 1 == d => g.1 = d,
            _ => groups.push((d, d)),
        }
    }
    let mut by_input: Vec<usize> = (0..groups.len()).collect();
    by_input.sort_by_key(|&g| groups[g].0);
    let in_shape: Vec<usize> = by_input
        .iter()
        .map(|&g| sizes[groups[g].0..=groups[g].1].iter().product())
        .collect();
    // Output dim k reads the merged input dim new_perm[k].
    let mut new_perm = vec![0; groups.len()];
    for (pos, &g) in by_input.iter().enumerate() {
        new_perm[g] = pos;
    }
    (in_shape, new_perm)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

fn permute(cl: &OpenClBackend, x: &Tensor, perm: &[usize], y: &Tensor) -> Result<()> {
    let md = mode(x.dtype(), y.dtype())?;
    let (xm, ym) = (OpenClBackend::mem(x)?, OpenClBackend::mem(y)?);
    let n = y.numel();
    let (shape, p) = collapse(x.shape(), perm);
    let r = p.len();
    let tile_ok = cl.ctx.info.max_work_group >= TILE * TILE;
    if r <= 1 {
        // No data moves: a copy (or conversion) of the whole tensor.
        if md == 0 {
            return cl.ctx.copy(xm, x.offset() * 4, ym, 0, n * 4);
        }
        let args = [
            Arg::Mem(xm),
            Arg::I32(off(x)),
            Arg::I32(md),
            Arg::Mem(ym),
            Arg::I32(n as i32),
        ];
        return cl
            .ctx
            .launch(PROGRAM, "shape_copy", &[n], Some(&[64]), &args);
    }
    let batched = match (r, p.as_slice()) {
        (2, [1, 0]) => Some((1, shape[0], shape[1])),
        (3, [0, 2, 1]) => Some((shape[0], shape[1], shape[2])),
        _ => None,
    };
    if let (Some((b, m, k)), true) = (batched, tile_ok) {
        return cl.ctx.launch(
            PROGRAM,
            "shape_transpose",
            &[k, m, b],
            Some(&[TILE, TILE, 1]),
            &[
                Arg::Mem(xm),
                Arg::I32(off(x)),
                Arg::I32(md),
                Arg::Mem(ym),
                Arg::I32(m as i32),
                Arg::I32(k as i32),
            ],
        );
    }
    if r > MAX_RANK {
        return Err(invalid(
            "permute",
            format!(
                "{perm:?} of {:?} moves more than {MAX_RANK} separate dims",
                x.shape()
            ),
        ));
    }
    // Output sizes and the source stride of each output dim, right-aligned
    // into MAX_RANK slots (leading slots: size 1, stride 0).
    let st = strides(&shape);
    let mut sizes = [1i32; MAX_RANK];
    let mut src = [0i32; MAX_RANK];
    for (k, &d) in p.iter().enumerate() {
        sizes[MAX_RANK - r + k] = shape[d] as i32;
        src[MAX_RANK - r + k] = st[d] as i32;
    }
    let mut args = vec![
        Arg::Mem(xm),
        Arg::I32(off(x)),
        Arg::I32(md),
        Arg::Mem(ym),
        Arg::I32(n as i32),
    ];
    args.extend(sizes.iter().map(|&s| Arg::I32(s)));
    args.extend(src.iter().map(|&s| Arg::I32(s)));
    cl.ctx
        .launch(PROGRAM, "shape_permute", &[n], Some(&[64]), &args)
}

fn concat(cl: &OpenClBackend, xs: &[&Tensor], dim: usize, y: &Tensor) -> Result<()> {
    let ym = OpenClBackend::mem(y)?;
    let (outer, total, inner) = split(y.shape(), dim);
    let pitch = total * inner;
    let mut at = 0;
    for x in xs {
        let md = mode(x.dtype(), y.dtype())?;
        let w = x.shape()[dim] * inner;
        let xm = OpenClBackend::mem(x)?;
        if outer == 1 && md == 0 {
            // One contiguous run (e.g. a dim-0 concat): a buffer copy.
            cl.ctx.copy(xm, x.offset() * 4, ym, at * 4, w * 4)?;
        } else if w > 0 {
            cl.ctx.launch(
                PROGRAM,
                "shape_concat",
                &[w, outer],
                None,
                &[
                    Arg::Mem(xm),
                    Arg::I32(off(x)),
                    Arg::I32(md),
                    Arg::Mem(ym),
                    Arg::I32(w as i32),
                    Arg::I32(outer as i32),
                    Arg::I32(pitch as i32),
                    Arg::I32(at as i32),
                ],
            )?;
        }
        at += w;
    }
    Ok(())
}

fn slice(
    cl: &OpenClBackend,
    x: &Tensor,
    dim: usize,
    start: usize,
    step: usize,
    y: &Tensor,
) -> Result<()> {
    let md = mode(x.dtype(), y.dtype())?;
    let (outer, n, inner) = split(x.shape(), dim);
    let cnt = y.shape()[dim];
    cl.ctx.launch(
        PROGRAM,
        "shape_slice",
        &[cnt * inner, outer],
        None,
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::I32(md),
            Arg::Mem(OpenClBackend::mem(y)?),
            Arg::I32(outer as i32),
            Arg::I32(n as i32),
            Arg::I32(inner as i32),
            Arg::I32(cnt as i32),
            Arg::I32(start as i32),
            Arg::I32(step as i32),
        ],
    )
}

/// Out-of-range indexes are an error, as on the CPU: the (small) index
/// tensor is read back and checked before any kernel is queued. The read
/// waits for the queue; index_select is not on a decoding step's path
/// (token lookups are `Embedding`).
fn check_indexes(cl: &OpenClBackend, idx: &Tensor, n: usize) -> Result<()> {
    let mut bytes = vec![0u8; idx.numel() * 4];
    cl.ctx
        .read(OpenClBackend::mem(idx)?, idx.offset() * 4, &mut bytes)?;
    let picks: Vec<i32> = bytemuck::pod_collect_to_vec(&bytes);
    match picks.iter().find(|&&i| i < 0 || i as usize >= n) {
        Some(&i) => Err(invalid(
            "index_select",
            format!("index {i} out of range for size {n}"),
        )),
        None => Ok(()),
    }
}

fn index_select(
    cl: &OpenClBackend,
    x: &Tensor,
    idx: &Tensor,
    dim: usize,
    y: &Tensor,
) -> Result<()> {
    let md = mode(x.dtype(), y.dtype())?;
    let (outer, n, inner) = split(x.shape(), dim);
    let cnt = idx.numel();
    let im = OpenClBackend::mem(idx)?;
    cl.ctx.launch(
        PROGRAM,
        "shape_index_select",
        &[cnt * inner, outer],
        None,
        &[
            Arg::Mem(OpenClBackend::mem(x)?),
            Arg::I32(off(x)),
            Arg::I32(md),
            Arg::Mem(im),
            Arg::I32(off(idx)),
            Arg::Mem(OpenClBackend::mem(y)?),
            Arg::I32(outer as i32),
            Arg::I32(n as i32),
            Arg::I32(inner as i32),
            Arg::I32(cnt as i32),
        ],
    )
}
