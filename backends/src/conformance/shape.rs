//! Conformance cases of the `shape` family: reshape, permute, concat,
//! slice and index select over ranks 1 to 5, every dim, odd sizes, and
//! the dtypes layout ops take (f32, i32, f16: floats come out f32, i32
//! stays i32; bf16 is widened at upload).

use super::{Case, Gen, NMSE_EXACT};
use crate::dtype::DType;
use crate::op::Op;
use crate::tensor::Tensor;

const DTYPES: [DType; 3] = [DType::F32, DType::I32, DType::F16];

/// Shapes of rank 1 to 5 with odd sizes and size-1 dims.
const SHAPES: [&[usize]; 7] = [
    &[7],
    &[33, 65],
    &[1, 9],
    &[3, 5, 7],
    &[2, 1, 6, 3],
    &[4, 3, 2, 5],
    &[2, 3, 1, 4, 3],
];

fn shape_str(s: &[usize]) -> String {
    format!("{s:?}")
}

pub fn cases() -> Vec<Case> {
    let mut g = Gen::new(0x54a9e);
    let mut v = vec![];
    reshape(&mut g, &mut v);
    permute(&mut g, &mut v);
    concat(&mut g, &mut v);
    slice(&mut g, &mut v);
    index_select(&mut g, &mut v);
    v
}

fn reshape(g: &mut Gen, v: &mut Vec<Case>) {
    for (from, to) in [
        (&[24][..], &[2, 3, 4][..]),
        (&[6, 35], &[210]),
        (&[3, 5, 7], &[7, 15]),
        (&[2, 3, 1, 4, 3], &[1, 72, 1]),
        (&[4, 4], &[2, 2, 2, 2, 1]),
        (&[0, 5], &[5, 0]),
    ] {
        for dt in DTYPES.into_iter().chain([DType::BF16]) {
            v.push(Case::new(
                format!("reshape {dt}{} -> {}", shape_str(from), shape_str(to)),
                Op::Reshape { shape: to.to_vec() },
                vec![g.typed(dt, from, 4.0)],
                NMSE_EXACT,
            ));
        }
    }
}

/// All permutations of `0..n`.
fn perms(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = vec![];
    for p in perms(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            out.push(q);
        }
    }
    out
}

fn permute(g: &mut Gen, v: &mut Vec<Case>) {
    let mut push = |g: &mut Gen, dt: DType, shape: &[usize], perm: Vec<usize>| {
        v.push(Case::new(
            format!("permute {dt}{} {perm:?}", shape_str(shape)),
            Op::Permute { perm },
            vec![g.typed(dt, shape, 4.0)],
            NMSE_EXACT,
        ));
    };
    // Every permutation of ranks 1-3; every one of rank 4 on one shape.
    for dt in DTYPES {
        for shape in [&[7][..], &[33, 65], &[3, 5, 7], &[17, 1, 19]] {
            for p in perms(shape.len()) {
                push(g, dt, shape, p);
            }
        }
    }
    for p in perms(4) {
        push(g, DType::F32, &[4, 3, 2, 5], p);
    }
    // Rank 4/5 with size-1 dims, other dtypes, and the model layouts:
    // [s, h, d] <-> [h, s, d], K^T over heads, big tiles with ragged edges.
    for dt in DTYPES {
        push(g, dt, &[2, 1, 6, 3], vec![3, 1, 0, 2]);
        push(g, dt, &[2, 3, 1, 4, 3], vec![4, 2, 0, 3, 1]);
        push(g, dt, &[2, 3, 2, 4, 3], vec![1, 0, 3, 4, 2]);
        push(g, dt, &[5, 7, 64], vec![1, 0, 2]);
        push(g, dt, &[3, 37, 50], vec![0, 2, 1]);
    }
    push(g, DType::F32, &[1, 1, 1], vec![2, 0, 1]);
    push(g, DType::F32, &[0, 3], vec![1, 0]);
    push(g, DType::F32, &[130, 3, 2, 70], vec![3, 1, 2, 0]);
}

fn concat(g: &mut Gen, v: &mut Vec<Case>) {
    for shape in SHAPES {
        for dim in 0..shape.len() {
            for (count, dts) in [
                (1, &[DType::F32][..]),
                (2, &[DType::F32, DType::F32]),
                (3, &[DType::I32, DType::I32, DType::I32]),
                (3, &[DType::F16, DType::F32, DType::F16]),
            ] {
                let parts: Vec<Tensor> = (0..count)
                    .map(|i| {
                        let mut s = shape.to_vec();
                        s[dim] = [shape[dim], 3, 1][i];
                        g.typed(dts[i], &s, 4.0)
                    })
                    .collect();
                let desc: Vec<String> = parts
                    .iter()
                    .map(|t| format!("{}{:?}", t.dtype(), t.shape()))
                    .collect();
                v.push(Case::new(
                    format!("concat dim {dim} {}", desc.join(" ")),
                    Op::Concat { dim },
                    parts,
                    NMSE_EXACT,
                ));
            }
        }
    }
    // i32 with floats gives f32; an empty part; i32 alone.
    let mixed = vec![
        g.typed(DType::I32, &[3, 4], 1.0),
        g.typed(DType::F32, &[3, 2], 1.0),
    ];
    v.push(Case::new(
        "concat dim 1 i32[3, 4] f32[3, 2]",
        Op::Concat { dim: 1 },
        mixed,
        NMSE_EXACT,
    ));
    let empty = vec![
        g.f32(&[2, 0, 3], 1.0),
        g.f32(&[2, 5, 3], 1.0),
        g.f32(&[2, 0, 3], 1.0),
    ];
    v.push(Case::new(
        "concat dim 1 f32 [2, 0|5|0, 3]",
        Op::Concat { dim: 1 },
        empty,
        NMSE_EXACT,
    ));
    let one = vec![g.typed(DType::I32, &[5, 3], 1.0)];
    v.push(Case::new(
        "concat dim 0 i32[5, 3]",
        Op::Concat { dim: 0 },
        one,
        NMSE_EXACT,
    ));
}

fn slice(g: &mut Gen, v: &mut Vec<Case>) {
    for shape in SHAPES {
        for dim in 0..shape.len() {
            let n = shape[dim];
            for step in [1, 2, 3] {
                for (start, end) in [(0, n), (n / 3, n), (n / 2, n / 2)] {
                    for dt in DTYPES {
                        v.push(Case::new(
                            format!(
                                "slice {dt}{} dim {dim} {start}..{end} step {step}",
                                shape_str(shape)
                            ),
                            Op::Slice {
                                dim,
                                start,
                                end,
                                step,
                            },
                            vec![g.typed(dt, shape, 4.0)],
                            NMSE_EXACT,
                        ));
                    }
                }
            }
        }
    }
    // A middle window with a ragged step, and a bf16 source.
    v.push(Case::new(
        "slice f32[9, 70] dim 1 5..68 step 3",
        Op::Slice {
            dim: 1,
            start: 5,
            end: 68,
            step: 3,
        },
        vec![g.f32(&[9, 70], 1.0)],
        NMSE_EXACT,
    ));
    v.push(Case::new(
        "slice bf16[6, 5] dim 0 1..4 step 1",
        Op::Slice {
            dim: 0,
            start: 1,
            end: 4,
            step: 1,
        },
        vec![g.typed(DType::BF16, &[6, 5], 1.0)],
        NMSE_EXACT,
    ));
}

fn index_select(g: &mut Gen, v: &mut Vec<Case>) {
    for shape in SHAPES {
        for dim in 0..shape.len() {
            let n = shape[dim];
            for count in [1, 4, 0] {
                for dt in DTYPES {
                    // Repeats and any order.
                    let idx = g.ids(&[count], n);
                    v.push(Case::new(
                        format!(
                            "index_select {dt}{} dim {dim} idx[{count}]",
                            shape_str(shape)
                        ),
                        Op::IndexSelect { dim },
                        vec![g.typed(dt, shape, 4.0), idx],
                        NMSE_EXACT,
                    ));
                }
            }
        }
    }
}

/// This family's cases alone on the OpenCL device (`tests/opencl.rs` runs
/// every family's): `cargo test -p mllm-backends --lib conformance::shape`.
#[cfg(all(test, feature = "opencl"))]
mod tests {
    #[test]
    fn opencl_matches_the_cpu() {
        super::device_check::run_family(super::cases());
    }

    /// Out-of-range indexes are errors on both backends (the CPU's check,
    /// which the OpenCL launcher repeats on the read-back indexes), also
    /// when the output is empty.
    #[test]
    fn opencl_refuses_out_of_range_indexes() {
        use crate::backend::Backend;
        use crate::op::Op;
        use crate::tensor::Tensor;
        if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
            return;
        }
        let cl = crate::opencl::OpenClBackend::new(0).expect("an OpenCL device");
        let cpu = crate::cpu::CpuBackend;
        for (shape, dim, idx) in [
            (vec![3, 4], 0, vec![0, 3]),
            (vec![3, 4], 1, vec![-1]),
            (vec![0, 4], 1, vec![4]),
        ] {
            let x = Tensor::from_f32(vec![1.0; shape.iter().product()], shape).expect("x");
            let n = idx.len();
            let i = Tensor::from_i32(idx, vec![n]).expect("idx");
            let op = Op::IndexSelect { dim };
            assert!(cpu.run(&op, &[&x, &i]).is_err());
            let err = cl.run(&op, &[&x, &i]).expect_err("out of range");
            assert!(err.to_string().contains("out of range"), "{err}");
        }
    }
}

/// Runs one family's cases on OpenCL device 0 twice: as the conformance
/// suite does (inputs uploaded whole), then with every input a view that
/// starts a few elements into its device buffer, which the suite's
/// uploads never produce but graph views (row slices, merged-linear
/// outputs) do: kernels must honour each input's offset.
#[cfg(all(test, feature = "opencl"))]
pub(super) mod device_check {
    use crate::backend::Backend;
    use crate::conformance::{nmse, run_case, Case};
    use crate::cpu::CpuBackend;
    use crate::dtype::DType;
    use crate::opencl::OpenClBackend;
    use crate::tensor::{FloatSlice, Tensor};
    use crate::Result;

    /// Elements of junk before each input's view.
    const PAD: usize = 3;

    pub fn run_family(cases: Vec<Case>) {
        if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
            eprintln!("MLLM_SKIP_OPENCL is set: the OpenCL backend was NOT tested");
            return;
        }
        let cl = match OpenClBackend::new(0) {
            Ok(b) => b,
            Err(e) => panic!("{e} (set MLLM_SKIP_OPENCL=1 to skip knowingly)"),
        };
        let mut failed = vec![];
        for case in &cases {
            if !crate::backend::Backend::supports(&cl, &case.op) {
                eprintln!("host  {:<14} {} (no kernel)", case.op.name(), case.name);
                continue;
            }
            let o = run_case(&cl, case);
            let shifted = match offset_run(&cl, case) {
                Ok(e) if e <= case.max_nmse => None,
                Ok(e) => Some(format!("offset views: nmse {e:.3e}")),
                Err(e) => Some(format!("offset views: {e}")),
            };
            let ok = o.passed() && shifted.is_none();
            eprintln!(
                "{:>4}  {:<14} {:<60} nmse {:>10.3e} {} {}",
                if ok { "ok" } else { "FAIL" },
                o.op,
                o.name,
                o.nmse.unwrap_or(f64::NAN),
                o.error.as_deref().unwrap_or(""),
                shifted.as_deref().unwrap_or("")
            );
            if !ok {
                failed.push(o.name);
            }
        }
        assert!(
            failed.is_empty(),
            "{} of {} failed: {failed:?}",
            failed.len(),
            cases.len()
        );
    }

    /// `t` on the device as a view `PAD` elements into a larger buffer
    /// (f32, i32 and f16; other dtypes are uploaded as they are).
    fn padded(cl: &OpenClBackend, t: &Tensor) -> Result<Tensor> {
        let n = t.numel();
        let flat = match t.dtype() {
            DType::F32 => {
                Tensor::from_f32([vec![7.0; PAD], t.f32s()?.to_vec()].concat(), vec![PAD + n])?
            }
            DType::I32 => {
                Tensor::from_i32([vec![7; PAD], t.i32s()?.to_vec()].concat(), vec![PAD + n])?
            }
            DType::F16 => match t.floats()? {
                FloatSlice::F16(h) => Tensor::from_f16(
                    [vec![half::f16::from_f32(7.0); PAD], h.to_vec()].concat(),
                    vec![PAD + n],
                )?,
                _ => return cl.upload(t.clone()),
            },
            _ => return cl.upload(t.clone()),
        };
        cl.upload(flat)?
            .narrow0(PAD, PAD + n)?
            .reshaped(t.shape().to_vec())
    }

    fn offset_run(cl: &OpenClBackend, case: &Case) -> Result<f64> {
        let refs: Vec<&Tensor> = case.inputs.iter().collect();
        let want = CpuBackend.run(&case.op, &refs)?;
        let dev: Vec<Tensor> = case
            .inputs
            .iter()
            .map(|t| padded(cl, t))
            .collect::<Result<_>>()?;
        let drefs: Vec<&Tensor> = dev.iter().collect();
        let got = cl.download(&cl.run(&case.op, &drefs)?)?;
        if got.shape() != want.shape() {
            return Ok(f64::INFINITY);
        }
        Ok(nmse(&got.to_f32_vec()?, &want.to_f32_vec()?))
    }
}
