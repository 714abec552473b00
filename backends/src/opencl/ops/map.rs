//! OpenCL launchers for the `map` family (program `kernels/map.cl`):
//! unary maps, broadcasting binary ops, `where`, casts, `full`, `arange`
//! and the fused `gated_act`. Each op picks one kernel by name (the op is
//! a compile-time constant of the kernel) and launches it over the output;
//! broadcasts are reduced here to the fewest dimensions the kernels walk.
//!
//! `arange` runs on the device when its values are integers within
//! +-2^24 (exact in i32 and f32 arithmetic, so equal to the CPU's f64
//! steps); other ranges (fractional steps) are computed on the host in
//! f64, exactly as the CPU does, and uploaded: such a tensor is tiny, and
//! mobile GPUs lack the f64 that matching it on the device would take.

use half::{bf16, f16};

use super::off;
use crate::dtype::DType;
use crate::error::Result;
use crate::infer::broadcast::broadcast_strides;
use crate::infer::TensorMeta;
use crate::op::{BinaryOp, Op, UnaryOp};
use crate::opencl::{invalid, wrap, Arg, OpenClBackend};
use crate::tensor::Tensor;

const PROGRAM: &str = "map";
/// Work-group size of every map kernel: a multiple of the wave width of
/// Adreno (64/128), Mali (16) and desktop GPUs (32/64), and within the
/// limit of every device even for the heavier (erf, pow) kernels.
const LOCAL: usize = 128;
/// Dimensions the broadcast kernels take (after merging).
const MAX_RANK: usize = 8;

/// Kernel names of the unary maps and of `gated_act`, indexed by
/// `UnaryOp as usize` (derived from the op table, as `map.cl`'s kernels
/// are named).
macro_rules! cl_unary_names {
    ($( $(#[$doc:meta])* $v:ident = $name:literal { $($rest:tt)* };)*) => {
        const UNARY: &[&str] = &[$(concat!("map_unary_", $name)),*];
        const GATED: &[&str] = &[$(concat!("map_gated_", $name)),*];
    };
}
crate::op::unary_table!(cl_unary_names);

/// Kernel names indexed by `binary_tag`.
macro_rules! binary_names {
    ($suffix:literal) => {
        [
            concat!("map_bin_add", $suffix),
            concat!("map_bin_sub", $suffix),
            concat!("map_bin_mul", $suffix),
            concat!("map_bin_div", $suffix),
            concat!("map_bin_pow", $suffix),
            concat!("map_bin_max", $suffix),
            concat!("map_bin_min", $suffix),
            concat!("map_bin_eq", $suffix),
            concat!("map_bin_ne", $suffix),
            concat!("map_bin_lt", $suffix),
            concat!("map_bin_le", $suffix),
            concat!("map_bin_gt", $suffix),
            concat!("map_bin_ge", $suffix),
        ]
    };
}

const BIN: [&str; 13] = binary_names!("");
const BIN_ND: [&str; 13] = binary_names!("_nd");
const BIN_I32: [&str; 13] = binary_names!("_i32");

fn binary_tag(b: BinaryOp) -> usize {
    match b {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Pow => 4,
        BinaryOp::Max => 5,
        BinaryOp::Min => 6,
        BinaryOp::Eq => 7,
        BinaryOp::Ne => 8,
        BinaryOp::Lt => 9,
        BinaryOp::Le => 10,
        BinaryOp::Gt => 11,
        BinaryOp::Ge => 12,
    }
}

/// The plain dtypes these kernels read and write.
fn plain(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::I32)
}

pub fn supports(op: &Op) -> bool {
    match op {
        Op::Unary(_) | Op::Binary(_) | Op::Where | Op::GatedAct { .. } => true,
        Op::Cast { dtype } | Op::Full { dtype, .. } | Op::Arange { dtype, .. } => plain(*dtype),
        _ => false,
    }
}

pub fn run(cl: &OpenClBackend, op: &Op, x: &[&Tensor], out: &TensorMeta) -> Result<Tensor> {
    match op {
        Op::Unary(u) => unary(cl, *u, x[0], out),
        Op::GatedAct { act } => gated(cl, *act, x[0], x[1], out),
        Op::Binary(b) => binary(cl, *b, x[0], x[1], out),
        Op::Where => where_(cl, x[0], x[1], x[2], out),
        Op::Cast { .. } => cast(cl, x[0], out),
        Op::Full { value, .. } => full(cl, *value, out),
        Op::Arange { start, step, .. } => arange(cl, *start, *step, out),
        _ => Err(invalid(
            "opencl",
            format!("`{}` is not a map op", op.name()),
        )),
    }
}

/// The kernels' code for a dtype (`DT_*` in map.cl).
fn dt(op: &'static str, d: DType) -> Result<i32> {
    Ok(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::I32 => 2,
        DType::BF16 => 3,
        DType::Quant(_) => return Err(invalid(op, format!("cannot read {d} tensors"))),
    })
}

/// A size or index as a kernel's `int` (tensors hold at most 2^31 values).
fn int(op: &'static str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid(op, format!("{v} elements are too many for i32 indexing")))
}

/// Work-items for kernels that take four elements each.
fn quads(n: usize) -> usize {
    n.div_ceil(4)
}

fn launch(cl: &OpenClBackend, name: &'static str, items: usize, args: &[Arg]) -> Result<()> {
    cl.ctx.launch(PROGRAM, name, &[items], Some(&[LOCAL]), args)
}

fn unary(cl: &OpenClBackend, u: UnaryOp, x: &Tensor, out: &TensorMeta) -> Result<Tensor> {
    let y = cl.empty(out)?;
    let n = int("unary", out.numel())?;
    let args = [
        Arg::Mem(OpenClBackend::mem(x)?),
        Arg::I32(off(x)),
        Arg::I32(dt("unary", x.dtype())?),
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::I32(n),
    ];
    launch(cl, UNARY[u as usize], quads(out.numel()), &args)?;
    Ok(y)
}

fn gated(
    cl: &OpenClBackend,
    act: UnaryOp,
    g: &Tensor,
    u: &Tensor,
    out: &TensorMeta,
) -> Result<Tensor> {
    let y = cl.empty(out)?;
    let n = int("gated_act", out.numel())?;
    let args = [
        Arg::Mem(OpenClBackend::mem(g)?),
        Arg::I32(off(g)),
        Arg::Mem(OpenClBackend::mem(u)?),
        Arg::I32(off(u)),
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::I32(n),
    ];
    launch(cl, GATED[act as usize], quads(out.numel()), &args)?;
    Ok(y)
}

/// The broadcast of `inputs` to `out` with dimensions merged where every
/// input steps through them contiguously (or all broadcast them), size-1
/// dimensions dropped: `(rank, sizes, strides per input)`, sizes and
/// strides padded at the front to `MAX_RANK`.
fn collapse(
    op: &'static str,
    out: &[usize],
    inputs: &[&[usize]],
) -> Result<(i32, [i32; MAX_RANK], Vec<[i32; MAX_RANK]>)> {
    let full: Vec<Vec<usize>> = inputs.iter().map(|s| broadcast_strides(s, out)).collect();
    let mut dims: Vec<usize> = vec![];
    let mut strides: Vec<Vec<usize>> = vec![vec![]; inputs.len()];
    for (d, &size) in out.iter().enumerate() {
        if size == 1 {
            continue;
        }
        // Dim `d` continues the previous kept dim for every input when that
        // dim's stride is exactly `size` of this one's.
        let merge = !dims.is_empty()
            && full
                .iter()
                .zip(&strides)
                .all(|(f, s)| s.last() == Some(&(f[d] * size)));
        if merge {
            if let Some(last) = dims.last_mut() {
                *last *= size;
            }
            for (f, s) in full.iter().zip(strides.iter_mut()) {
                if let Some(last) = s.last_mut() {
                    *last = f[d];
                }
            }
        } else {
            dims.push(size);
            for (f, s) in full.iter().zip(strides.iter_mut()) {
                s.push(f[d]);
            }
        }
    }
    let rank = dims.len();
    if rank > MAX_RANK {
        return Err(invalid(
            op,
            format!("broadcasting {inputs:?} to {out:?} walks {rank} dimensions; the kernels take {MAX_RANK}"),
        ));
    }
    let pad = MAX_RANK - rank;
    let mut sizes = [1i32; MAX_RANK];
    for (i, &d) in dims.iter().enumerate() {
        sizes[pad + i] = int(op, d)?;
    }
    let mut st = vec![[0i32; MAX_RANK]; inputs.len()];
    for (row, s) in st.iter_mut().zip(&strides) {
        for (i, &v) in s.iter().enumerate() {
            row[pad + i] = int(op, v)?;
        }
    }
    Ok((rank as i32, sizes, st))
}

/// Appends the broadcast walk's arguments (`ND_DIMS`, then each input's
/// `ND_STRIDES`).
fn nd_args<'a>(
    args: &mut Vec<Arg<'a>>,
    rank: i32,
    sizes: &[i32; MAX_RANK],
    strides: &[[i32; MAX_RANK]],
) {
    args.push(Arg::I32(rank));
    args.extend(sizes.iter().map(|&v| Arg::I32(v)));
    for s in strides {
        args.extend(s.iter().map(|&v| Arg::I32(v)));
    }
}

fn binary(
    cl: &OpenClBackend,
    b: BinaryOp,
    x: &Tensor,
    y: &Tensor,
    out: &TensorMeta,
) -> Result<Tensor> {
    let z = cl.empty(out)?;
    let numel = out.numel();
    let n = int("binary", numel)?;
    let (xm, ym, zm) = (
        OpenClBackend::mem(x)?,
        OpenClBackend::mem(y)?,
        OpenClBackend::mem(&z)?,
    );
    let tag = binary_tag(b);
    if out.dtype == DType::I32 {
        let (rank, sizes, st) = collapse("binary", &out.shape, &[x.shape(), y.shape()])?;
        // The CPU refuses an integer division by zero: a flag the kernel
        // sets, read back only for divisions.
        // Other ops never write it: they get the output as a stand-in.
        let err = if b == BinaryOp::Div {
            let m = cl.ctx.alloc(4)?;
            cl.ctx.write(&m, 0, &[0u8; 4])?;
            Some(m)
        } else {
            None
        };
        let mut args = vec![
            Arg::Mem(xm),
            Arg::I32(off(x)),
            Arg::Mem(ym),
            Arg::I32(off(y)),
            Arg::Mem(zm),
            Arg::I32(n),
            Arg::Mem(err.as_deref().unwrap_or(zm)),
        ];
        nd_args(&mut args, rank, &sizes, &st);
        launch(cl, BIN_I32[tag], numel, &args)?;
        if let Some(err) = &err {
            let mut flag = [0u8; 4];
            cl.ctx.read(err, 0, &mut flag)?;
            if flag != [0u8; 4] {
                return Err(invalid("binary", "integer division by zero"));
            }
        }
        return Ok(z);
    }
    let (xdt, ydt) = (dt("binary", x.dtype())?, dt("binary", y.dtype())?);
    // A side that is all of the output (its shape equal up to size-1
    // dims) or a single value takes the vectorized contiguous kernel.
    let side = |t: &Tensor| match t.numel() {
        k if k == numel => Some(1),
        1 => Some(0),
        _ => None,
    };
    if let (Some(xs), Some(ys)) = (side(x), side(y)) {
        let args = [
            Arg::Mem(xm),
            Arg::I32(off(x)),
            Arg::I32(xdt),
            Arg::I32(xs),
            Arg::Mem(ym),
            Arg::I32(off(y)),
            Arg::I32(ydt),
            Arg::I32(ys),
            Arg::Mem(zm),
            Arg::I32(n),
        ];
        launch(cl, BIN[tag], quads(numel), &args)?;
        return Ok(z);
    }
    let (rank, sizes, st) = collapse("binary", &out.shape, &[x.shape(), y.shape()])?;
    let mut args = vec![
        Arg::Mem(xm),
        Arg::I32(off(x)),
        Arg::I32(xdt),
        Arg::Mem(ym),
        Arg::I32(off(y)),
        Arg::I32(ydt),
        Arg::Mem(zm),
        Arg::I32(n),
    ];
    nd_args(&mut args, rank, &sizes, &st);
    launch(cl, BIN_ND[tag], numel, &args)?;
    Ok(z)
}

fn where_(
    cl: &OpenClBackend,
    c: &Tensor,
    a: &Tensor,
    b: &Tensor,
    out: &TensorMeta,
) -> Result<Tensor> {
    let z = cl.empty(out)?;
    let n = int("where", out.numel())?;
    let (rank, sizes, st) = collapse("where", &out.shape, &[c.shape(), a.shape(), b.shape()])?;
    let mut args = vec![];
    for t in [c, a, b] {
        args.push(Arg::Mem(OpenClBackend::mem(t)?));
        args.push(Arg::I32(off(t)));
        args.push(Arg::I32(dt("where", t.dtype())?));
    }
    args.push(Arg::Mem(OpenClBackend::mem(&z)?));
    args.push(Arg::I32(n));
    nd_args(&mut args, rank, &sizes, &st);
    launch(cl, "map_where", out.numel(), &args)?;
    Ok(z)
}

fn cast(cl: &OpenClBackend, x: &Tensor, out: &TensorMeta) -> Result<Tensor> {
    if x.dtype() == out.dtype {
        // As the CPU: the same tensor.
        return Ok(x.clone());
    }
    let y = cl.empty(out)?;
    let n = int("cast", out.numel())?;
    let args = [
        Arg::Mem(OpenClBackend::mem(x)?),
        Arg::I32(off(x)),
        Arg::I32(dt("cast", x.dtype())?),
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::I32(dt("cast", out.dtype)?),
        Arg::I32(n),
    ];
    launch(cl, "map_cast", quads(out.numel()), &args)?;
    Ok(y)
}

/// The stored bits of `value` as the CPU makes them: `as i32` from f64 for
/// i32 (saturating, NaN to 0), else through f32 then the dtype's rounding.
fn bits(value: f64, dtype: DType) -> Result<u32> {
    Ok(match dtype {
        DType::I32 => value as i32 as u32,
        DType::F32 => (value as f32).to_bits(),
        DType::F16 => f16::from_f32(value as f32).to_bits() as u32,
        DType::BF16 => bf16::from_f32(value as f32).to_bits() as u32,
        DType::Quant(_) => return Err(invalid("full", format!("cannot make {dtype} tensors"))),
    })
}

fn full(cl: &OpenClBackend, value: f64, out: &TensorMeta) -> Result<Tensor> {
    let y = cl.empty(out)?;
    let n = int("full", out.numel())?;
    let name = if out.dtype.size() == 2 {
        "map_fill16"
    } else {
        "map_fill32"
    };
    let args = [
        Arg::Mem(OpenClBackend::mem(&y)?),
        Arg::U32(bits(value, out.dtype)?),
        Arg::I32(n),
    ];
    launch(cl, name, quads(out.numel()), &args)?;
    Ok(y)
}

fn arange(cl: &OpenClBackend, start: f64, step: f64, out: &TensorMeta) -> Result<Tensor> {
    let len = out.numel();
    let n = int("arange", len)?;
    const LIMIT: f64 = (1 << 24) as f64;
    let last = start + len.saturating_sub(1) as f64 * step;
    let integral = start.fract() == 0.0 && step.fract() == 0.0;
    if integral && start.abs() <= LIMIT && last.abs() <= LIMIT && step.abs() <= LIMIT {
        let y = cl.empty(out)?;
        let args = [
            Arg::Mem(OpenClBackend::mem(&y)?),
            Arg::I32(dt("arange", out.dtype)?),
            Arg::I32(start as i32),
            Arg::I32(step as i32),
            Arg::I32(n),
        ];
        launch(cl, "map_arange", len, &args)?;
        return Ok(y);
    }
    // Fractional steps: the CPU's f64 values, narrowed as it narrows them.
    let mut bytes = Vec::with_capacity(len * out.dtype.size());
    for i in 0..len {
        let b = bits(start + i as f64 * step, out.dtype)?;
        if out.dtype.size() == 2 {
            bytes.extend_from_slice(&(b as u16).to_le_bytes());
        } else {
            bytes.extend_from_slice(&b.to_le_bytes());
        }
    }
    let mem = cl.ctx.alloc(bytes.len())?;
    cl.ctx.write(&mem, 0, &bytes)?;
    wrap(mem, out.dtype, out.shape.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::conformance::{nmse, Gen};
    use crate::cpu::CpuBackend;

    #[test]
    fn collapse_merges_contiguous_and_broadcast_dims() {
        // Equal shapes: one dimension.
        let (rank, sizes, st) = collapse("t", &[2, 3, 4], &[&[2, 3, 4], &[2, 3, 4]]).expect("ok");
        assert_eq!((rank, sizes[7], st[0][7], st[1][7]), (1, 24, 1, 1));
        // A row broadcast: rows (stride 0 for the row) by columns.
        let (rank, sizes, st) = collapse("t", &[5, 6, 7], &[&[5, 6, 7], &[7]]).expect("ok");
        assert_eq!(rank, 2);
        assert_eq!((sizes[6], sizes[7]), (30, 7));
        assert_eq!((st[0][6], st[0][7], st[1][6], st[1][7]), (7, 1, 0, 1));
        // Size-1 dims vanish; a 0-d output has rank 0.
        let (rank, _, _) = collapse("t", &[1, 1], &[&[], &[1, 1]]).expect("ok");
        assert_eq!(rank, 0);
        // Nine alternating broadcast dims do not fit the kernels.
        let a = [2, 1, 2, 1, 2, 1, 2, 1, 2];
        let b = [1, 2, 1, 2, 1, 2, 1, 2, 1];
        assert!(collapse("t", &[2; 9], &[&a, &b]).is_err());
    }

    fn device() -> Option<OpenClBackend> {
        if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
            eprintln!("MLLM_SKIP_OPENCL is set: the OpenCL map kernels were NOT tested");
            return None;
        }
        Some(OpenClBackend::new(0).expect("an OpenCL device (or MLLM_SKIP_OPENCL=1)"))
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let Some(cl) = device() else { return };
        let a = Tensor::from_i32(vec![1, 2, 3], vec![3]).expect("t");
        let b = Tensor::from_i32(vec![1, 0, 3], vec![3]).expect("t");
        let op = Op::Binary(BinaryOp::Div);
        assert!(CpuBackend.run(&op, &[&a, &b]).is_err());
        assert!(cl.run(&op, &[&a, &b]).is_err());
        // The other integer ops never read the flag.
        assert!(cl.run(&Op::Binary(BinaryOp::Mul), &[&a, &b]).is_ok());
    }

    /// Row views (non-zero offsets into a larger device buffer) as inputs.
    #[test]
    fn views_read_from_their_offset() {
        let Some(cl) = device() else { return };
        let mut g = Gen::new(11);
        let host = g.f32(&[5, 9], 2.0);
        let dev = cl.upload(host.clone()).expect("upload");
        let (hv, dv) = (
            host.narrow0(2, 4).expect("view"),
            dev.narrow0(2, 4).expect("view"),
        );
        let (hr, dr) = (
            host.narrow0(1, 2).expect("view"),
            dev.narrow0(1, 2).expect("view"),
        );
        let hr = hr.reshaped(vec![9]).expect("row");
        let dr = dr.reshaped(vec![9]).expect("row");
        let cases: Vec<(Op, Vec<&Tensor>, Vec<&Tensor>)> = vec![
            (Op::Unary(UnaryOp::Silu), vec![&hv], vec![&dv]),
            (Op::Binary(BinaryOp::Sub), vec![&hv, &hv], vec![&dv, &dv]),
            (Op::Binary(BinaryOp::Mul), vec![&hv, &hr], vec![&dv, &dr]),
            (Op::Where, vec![&hr, &hv, &hr], vec![&dr, &dv, &dr]),
            (Op::Cast { dtype: DType::F16 }, vec![&hv], vec![&dv]),
            (
                Op::GatedAct { act: UnaryOp::Gelu },
                vec![&hv, &hv],
                vec![&dv, &dv],
            ),
        ];
        for (op, h, d) in cases {
            let want = CpuBackend
                .run(&op, &h)
                .expect("cpu")
                .to_f32_vec()
                .expect("f32");
            let got = cl.run(&op, &d).expect("run");
            let got = cl
                .download(&got)
                .expect("download")
                .to_f32_vec()
                .expect("f32");
            assert!(
                nmse(&got, &want) < 1e-10,
                "{}: {got:?} vs {want:?}",
                op.name()
            );
        }
    }
}
