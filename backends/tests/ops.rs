//! Every op of the vocabulary runs on the CPU backend on a small case with a
//! hand-checked answer. The list of cases must cover `Op::ALL_NAMES`, so a
//! new op without a test fails here (the pattern later backends reuse: one
//! body, every device, compared against the CPU).

use mllm_backends::{Backend, BinaryOp, CpuBackend, DType, Op, ReduceOp, Tensor, UnaryOp};

fn f(v: &[f32], s: &[usize]) -> Tensor {
    Tensor::from_f32(v.to_vec(), s.to_vec()).expect("tensor")
}

fn i(v: &[i32], s: &[usize]) -> Tensor {
    Tensor::from_i32(v.to_vec(), s.to_vec()).expect("tensor")
}

struct Case {
    op: Op,
    inputs: Vec<Tensor>,
    want: Vec<f32>,
    shape: Vec<usize>,
}

fn cases() -> Vec<Case> {
    let x23 = f(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let c = |op: Op, inputs: Vec<Tensor>, want: &[f32], shape: &[usize]| Case {
        op,
        inputs,
        want: want.to_vec(),
        shape: shape.to_vec(),
    };
    let inv = 1.0 / ((1.0f32 + 4.0) / 2.0 + 1e-6).sqrt();
    vec![
        c(
            Op::Linear,
            vec![
                x23.clone(),
                f(&[1., 0., 1., 0., 1., 0.], &[2, 3]),
                f(&[10., 20.], &[2]),
            ],
            &[14., 22., 20., 25.],
            &[2, 2],
        ),
        c(
            Op::Matmul,
            vec![x23.clone(), f(&[1., 0., 0., 1., 1., 1.], &[3, 2])],
            &[4., 5., 10., 11.],
            &[2, 2],
        ),
        c(
            Op::Embedding,
            vec![x23.clone(), i(&[1, 0], &[2])],
            &[4., 5., 6., 1., 2., 3.],
            &[2, 3],
        ),
        c(
            Op::RmsNorm { eps: 1e-6 },
            vec![f(&[1., 2.], &[1, 2]), f(&[1., 2.], &[2])],
            &[inv, 4.0 * inv],
            &[1, 2],
        ),
        c(
            Op::LayerNorm { eps: 0.0 },
            vec![
                f(&[1., 3.], &[1, 2]),
                f(&[1., 1.], &[2]),
                f(&[0., 1.], &[2]),
            ],
            &[-1., 2.],
            &[1, 2],
        ),
        c(
            Op::ApplyRope,
            vec![
                f(&[1., 0.], &[1, 1, 2]),
                f(&[0.], &[1, 1]),
                f(&[1.], &[1, 1]),
            ],
            &[0., 1.],
            &[1, 1, 2],
        ),
        c(
            Op::Sdpa {
                causal: true,
                scale: 1.0,
                window: 0,
            },
            vec![
                f(&[1., 1.], &[2, 1, 1]),
                f(&[0., 0.], &[2, 1, 1]),
                f(&[2., 4.], &[2, 1, 1]),
            ],
            &[2., 3.],
            &[2, 1, 1],
        ),
        c(
            Op::GatedAct { act: UnaryOp::Relu },
            vec![f(&[-1., 2., 3.], &[3]), f(&[5., 4., 0.5], &[3])],
            &[0., 8., 1.5],
            &[3],
        ),
        // [x + y; rms_norm(x + y, w)]: x + y = [1, 2] as in the RmsNorm case.
        c(
            Op::AddRmsNorm { eps: 1e-6 },
            vec![
                f(&[0.5, 3.], &[1, 2]),
                f(&[0.5, -1.], &[1, 2]),
                f(&[1., 2.], &[2]),
            ],
            &[1., 2., inv, 4.0 * inv],
            &[2, 1, 2],
        ),
        // [x @ w1^T | x @ w2^T], each part [2, n_i] row-major, flattened.
        c(
            Op::MergedLinear {
                parts: 2,
                norm_eps: None,
            },
            vec![
                x23.clone(),
                f(&[1., 0., 1., 0., 1., 0.], &[2, 3]),
                f(&[1., 1., 1.], &[1, 3]),
            ],
            &[4., 2., 10., 5., 6., 15.],
            &[6],
        ),
        // rms_norm([1, 2], [1, 2]) = [inv, 4 inv], then [1, 1] and [0, 1].
        c(
            Op::MergedLinear {
                parts: 2,
                norm_eps: Some(1e-6),
            },
            vec![
                f(&[1., 2.], &[1, 2]),
                f(&[1., 2.], &[2]),
                f(&[1., 1.], &[1, 2]),
                f(&[0., 1.], &[1, 2]),
            ],
            &[5.0 * inv, 4.0 * inv],
            &[2],
        ),
        // Rows of the cache past `past_len` (99, 1000) must not be seen.
        c(
            Op::CachedSdpa {
                causal: true,
                scale: 1.0,
                window: 0,
            },
            vec![
                f(&[1.], &[1, 1, 1]),
                f(&[0.], &[1, 1, 1]),
                f(&[6.], &[1, 1, 1]),
                f(&[0., 0., 99.], &[3, 1, 1]),
                f(&[2., 4., 1000.], &[3, 1, 1]),
                i(&[2], &[1]),
            ],
            &[4.],
            &[1, 1, 1],
        ),
        c(
            Op::Unary(UnaryOp::Relu),
            vec![f(&[-1., 2.], &[2])],
            &[0., 2.],
            &[2],
        ),
        c(
            Op::Binary(BinaryOp::Sub),
            vec![x23.clone(), f(&[1., 2., 3.], &[3])],
            &[0., 0., 0., 3., 3., 3.],
            &[2, 3],
        ),
        c(
            Op::Softmax { dim: 0 },
            vec![f(&[0., 0.], &[2])],
            &[0.5, 0.5],
            &[2],
        ),
        c(
            Op::Reduce {
                op: ReduceOp::Sum,
                dim: 0,
                keepdim: false,
            },
            vec![x23.clone()],
            &[5., 7., 9.],
            &[3],
        ),
        c(
            Op::Argmax { dim: 1 },
            vec![f(&[1., 9., 3., 7., 2., 0.], &[2, 3])],
            &[1., 0.],
            &[2],
        ),
        c(
            Op::Reshape { shape: vec![3, 2] },
            vec![x23.clone()],
            &[1., 2., 3., 4., 5., 6.],
            &[3, 2],
        ),
        c(
            Op::Permute { perm: vec![1, 0] },
            vec![x23.clone()],
            &[1., 4., 2., 5., 3., 6.],
            &[3, 2],
        ),
        c(
            Op::Concat { dim: 1 },
            vec![x23.clone(), f(&[7., 8.], &[2, 1])],
            &[1., 2., 3., 7., 4., 5., 6., 8.],
            &[2, 4],
        ),
        c(
            Op::Slice {
                dim: 1,
                start: 0,
                end: 3,
                step: 2,
            },
            vec![x23.clone()],
            &[1., 3., 4., 6.],
            &[2, 2],
        ),
        c(
            Op::IndexSelect { dim: 0 },
            vec![x23.clone(), i(&[1, 1], &[2])],
            &[4., 5., 6., 4., 5., 6.],
            &[2, 3],
        ),
        // Largest first; the tie (3 at 1 and 3) takes the lower index.
        c(
            Op::TopK { k: 2 },
            vec![f(&[1., 3., 0., 3., 2., 5., 4., 6.], &[2, 4])],
            &[1., 3., 3., 1.],
            &[2, 2],
        ),
        // out[i][j] = x[i][idx[i][j]].
        c(
            Op::Gather { dim: 1 },
            vec![x23.clone(), i(&[2, 0, 1, 1], &[2, 2])],
            &[3., 1., 5., 5.],
            &[2, 2],
        ),
        // Expert 0 keeps the first two features; expert 1 gives their sum
        // and the last. Token 0 picks experts (1, 0), token 1 (0, 1).
        c(
            Op::MoeLinear,
            vec![
                x23.clone(),
                i(&[1, 0, 0, 1], &[2, 2]),
                f(&[1., 0., 0., 0., 1., 0.], &[2, 3]),
                f(&[1., 1., 1., 0., 0., 1.], &[2, 3]),
            ],
            &[6., 3., 1., 2., 4., 5., 15., 6.],
            &[2, 2, 2],
        ),
        // state [1, 2] then x [3, 4], taps [1, 10, 100]: the outputs
        // 1 + 20 + 300 and 2 + 30 + 400, then the new state [3, 4].
        c(
            Op::CausalConv1d,
            vec![
                f(&[3., 4.], &[2, 1]),
                f(&[1., 10., 100.], &[1, 3]),
                f(&[1., 2.], &[2, 1]),
            ],
            &[321., 432., 3., 4.],
            &[4, 1],
        ),
        // From a zero state: delta = beta * v = 1, S = k, o = q.k = 0.6;
        // packed as the output, then the state.
        c(
            Op::GatedDeltaRule,
            vec![
                f(&[1., 0.], &[1, 1, 2]),
                f(&[0.6, 0.8], &[1, 1, 2]),
                f(&[2.], &[1, 1, 1]),
                f(&[0.], &[1, 1]),
                f(&[0.5], &[1, 1]),
                f(&[0., 0.], &[1, 2, 1]),
            ],
            &[0.6, 0.6, 0.8],
            &[3],
        ),
        c(
            Op::Where,
            vec![f(&[1., 0.], &[2]), f(&[5., 5.], &[2]), f(&[7.], &[1])],
            &[5., 7.],
            &[2],
        ),
        c(
            Op::Cast { dtype: DType::BF16 },
            vec![f(&[1.5, -2.0], &[2])],
            &[1.5, -2.0],
            &[2],
        ),
        c(
            Op::Arange {
                start: 1.0,
                end: 7.0,
                step: 2.0,
                dtype: DType::I32,
            },
            vec![],
            &[1., 3., 5.],
            &[3],
        ),
        c(
            Op::Full {
                shape: vec![2],
                value: 0.25,
                dtype: DType::F32,
            },
            vec![],
            &[0.25, 0.25],
            &[2],
        ),
    ]
}

#[test]
fn every_op_runs_on_cpu_with_the_right_answer() {
    for case in cases() {
        let refs: Vec<&Tensor> = case.inputs.iter().collect();
        let out = CpuBackend
            .run(&case.op, &refs)
            .unwrap_or_else(|e| panic!("{}: {e}", case.op.name()));
        assert_eq!(out.shape(), &case.shape[..], "{}: shape", case.op.name());
        let got = out.to_f32_vec().expect("values");
        for (g, w) in got.iter().zip(&case.want) {
            assert!(
                (g - w).abs() < 1e-5,
                "{}: got {got:?}, want {:?}",
                case.op.name(),
                case.want
            );
        }
    }
}

/// `run_into` (a compiled graph's arena) gives exactly `run`'s values for
/// every op it serves, and says no for the others. The buffer starts as
/// NaN: the arena is not zeroed, so an op must write every value and read
/// none.
#[test]
fn run_into_equals_run() {
    let mut served = 0;
    for case in cases() {
        let refs: Vec<&Tensor> = case.inputs.iter().collect();
        let want = CpuBackend.run(&case.op, &refs).expect("run");
        let meta = mllm_backends::TensorMeta::of(&want);
        let mut out = vec![f32::NAN; want.numel()];
        let wrote = CpuBackend
            .run_into(&case.op, &refs, &mut out)
            .unwrap_or_else(|e| panic!("{}: {e}", case.op.name()));
        assert_eq!(
            wrote,
            CpuBackend.writes_into(&case.op, &meta),
            "{}",
            case.op.name()
        );
        if wrote {
            served += 1;
            assert_eq!(out, want.to_f32_vec().expect("f32"), "{}", case.op.name());
        }
    }
    assert!(served >= 8, "{served} ops served");
}

#[test]
fn the_cases_cover_the_whole_vocabulary() {
    let covered: Vec<&str> = cases().iter().map(|c| c.op.name()).collect();
    for name in Op::ALL_NAMES {
        assert!(
            covered.contains(name),
            "op `{name}` has no conformance case"
        );
    }
    for name in &covered {
        assert!(
            Op::ALL_NAMES.contains(name),
            "`{name}` is missing from Op::ALL_NAMES"
        );
    }
}

#[test]
fn bad_shapes_and_dtypes_are_errors() {
    let x = f(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let bad: Vec<(Op, Vec<Tensor>)> = vec![
        (Op::Linear, vec![x.clone(), f(&[1., 2.], &[1, 2])]),
        (Op::Matmul, vec![x.clone(), x.clone()]),
        (Op::Embedding, vec![x.clone(), i(&[5], &[1])]),
        (Op::Embedding, vec![x.clone(), x.clone()]),
        (
            Op::Sdpa {
                causal: true,
                scale: 1.0,
                window: 0,
            },
            vec![
                f(&[1.; 6], &[3, 2, 1]),
                f(&[1.; 3], &[1, 3, 1]),
                f(&[1.; 3], &[1, 3, 1]),
            ],
        ),
        (Op::Permute { perm: vec![0, 0] }, vec![x.clone()]),
        (
            Op::Slice {
                dim: 1,
                start: 2,
                end: 9,
                step: 1,
            },
            vec![x.clone()],
        ),
        (Op::Reshape { shape: vec![4] }, vec![x.clone()]),
        (
            Op::Binary(BinaryOp::Add),
            vec![x.clone(), f(&[1., 2.], &[2])],
        ),
        (
            Op::Full {
                shape: vec![1 << 20, 1 << 20],
                value: 0.0,
                dtype: DType::F32,
            },
            vec![],
        ),
        (
            Op::Binary(BinaryOp::Div),
            vec![i(&[1], &[1]), i(&[0], &[1])],
        ),
        (Op::TopK { k: 4 }, vec![x.clone()]),
        (Op::TopK { k: 0 }, vec![x.clone()]),
        (Op::TopK { k: 1 }, vec![i(&[1, 2], &[2])]),
        (Op::Gather { dim: 1 }, vec![x.clone(), i(&[3], &[1, 1])]),
        (Op::Gather { dim: 1 }, vec![x.clone(), i(&[-1], &[1, 1])]),
        (
            Op::Gather { dim: 1 },
            vec![x.clone(), i(&[0, 0, 0], &[3, 1])],
        ),
        (Op::Gather { dim: 0 }, vec![x.clone(), f(&[0.; 3], &[1, 3])]),
        (Op::Gather { dim: 2 }, vec![x.clone(), i(&[0], &[1, 1])]),
        // An id past the experts, a negative one, x of the wrong width,
        // experts of two shapes, ids that are not [t, s].
        (
            Op::MoeLinear,
            vec![x.clone(), i(&[0, 2], &[2, 1]), x.clone(), x.clone()],
        ),
        (
            Op::MoeLinear,
            vec![x.clone(), i(&[0, -1], &[2, 1]), x.clone()],
        ),
        (
            Op::MoeLinear,
            vec![x.clone(), i(&[0, 0], &[2, 1]), f(&[1.; 4], &[2, 2])],
        ),
        (
            Op::MoeLinear,
            vec![
                x.clone(),
                i(&[0, 0], &[2, 1]),
                x.clone(),
                f(&[1.; 3], &[1, 3]),
            ],
        ),
        (Op::MoeLinear, vec![x.clone(), i(&[0, 0], &[2]), x.clone()]),
        (Op::MoeLinear, vec![x.clone(), i(&[0, 0], &[2, 1])]),
        // The state must be [kernel - 1, c]; the delta rule's v heads a
        // multiple of the key heads.
        (
            Op::CausalConv1d,
            vec![x.clone(), f(&[1., 2., 3., 4., 5., 6.], &[3, 2]), x.clone()],
        ),
        (
            Op::GatedDeltaRule,
            vec![
                f(&[0.; 4], &[1, 2, 2]),
                f(&[0.; 4], &[1, 2, 2]),
                f(&[0.; 3], &[1, 3, 1]),
                f(&[0.; 3], &[1, 3]),
                f(&[0.; 3], &[1, 3]),
                f(&[0.; 6], &[3, 2, 1]),
            ],
        ),
    ];
    for (op, inputs) in bad {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        assert!(CpuBackend.run(&op, &refs).is_err(), "{op:?} should fail");
    }
}
