//! Element-wise maps, comparisons, casts, softmax and reductions, with our
//! dtype rules made explicit: int32 only where both operands are i32 (then
//! `/` is floor division, as the CPU's), comparisons give 1/0 in the
//! result's type, unary maps and reductions read ints as floats.

use mllm_backends::{BinaryOp, DType, ReduceOp, UnaryOp};

use super::super::builder::Builder;
use super::super::proto::{attr_int, DataType};
use super::Ctx;
use crate::ir::ValueId;
use crate::Result;

pub fn unary(b: &mut Builder, u: UnaryOp, x: &str) -> String {
    let simple = match u {
        UnaryOp::Neg => "Neg",
        UnaryOp::Exp => "Exp",
        UnaryOp::Log => "Log",
        UnaryOp::Sqrt => "Sqrt",
        UnaryOp::Recip => "Reciprocal",
        UnaryOp::Abs => "Abs",
        UnaryOp::Sin => "Sin",
        UnaryOp::Cos => "Cos",
        UnaryOp::Tanh => "Tanh",
        UnaryOp::Sigmoid => "Sigmoid",
        UnaryOp::Relu => "Relu",
        // ln(exp(x) + 1); torch's threshold (x itself above 20) changes
        // nothing in f32 (ln(1 + e^x) - x < 2.1e-9 there).
        UnaryOp::Softplus => "Softplus",
        UnaryOp::Rsqrt => {
            let r = b.node("Sqrt", &[x], vec![]);
            return b.node("Reciprocal", &[&r], vec![]);
        }
        UnaryOp::Silu => {
            let s = b.node("Sigmoid", &[x], vec![]);
            return b.binary("Mul", x, &s);
        }
        // 0.5 x (1 + erf(x / sqrt 2)); opset 20's Gelu is not in opset 17.
        UnaryOp::Gelu => {
            let r2 = b.f32_scalar(std::f32::consts::SQRT_2);
            let t = b.binary("Div", x, &r2);
            let e = b.node("Erf", &[&t], vec![]);
            return half_x_one_plus(b, x, &e);
        }
        // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³))).
        UnaryOp::GeluTanh => {
            let x2 = b.binary("Mul", x, x);
            let x3 = b.binary("Mul", &x2, x);
            let c = b.f32_scalar(0.044715);
            let cx3 = b.binary("Mul", &x3, &c);
            let inner = b.binary("Add", x, &cx3);
            let k = b.f32_scalar((2.0 / std::f32::consts::PI).sqrt());
            let arg = b.binary("Mul", &inner, &k);
            let t = b.node("Tanh", &[&arg], vec![]);
            return half_x_one_plus(b, x, &t);
        }
    };
    b.node(simple, &[x], vec![])
}

/// `0.5 * x * (1 + t)`.
fn half_x_one_plus(b: &mut Builder, x: &str, t: &str) -> String {
    let one = b.f32_scalar(1.0);
    let half = b.f32_scalar(0.5);
    let s = b.binary("Add", t, &one);
    let hx = b.binary("Mul", x, &half);
    b.binary("Mul", &hx, &s)
}

pub fn binary(c: &mut Ctx, id: ValueId, op: BinaryOp, ins: &[ValueId]) -> Result<String> {
    let int = c.meta(id).dtype == DType::I32;
    let (x, y) = if int {
        (c.value(ins[0])?, c.value(ins[1])?)
    } else {
        (c.float(ins[0])?, c.float(ins[1])?)
    };
    let out_type = if int {
        DataType::Int32
    } else {
        DataType::Float
    };
    let b = &mut c.b;
    let cmp = |b: &mut Builder, name: &str| {
        let r = b.binary(name, &x, &y);
        b.cast(&r, out_type)
    };
    Ok(match op {
        BinaryOp::Add => b.binary("Add", &x, &y),
        BinaryOp::Sub => b.binary("Sub", &x, &y),
        BinaryOp::Mul => b.binary("Mul", &x, &y),
        // ONNX integer Div truncates; scripts' `//` floors: (x - x mod y) / y
        // with Mod taking the divisor's sign is exact.
        BinaryOp::Div if int => {
            let m = b.node("Mod", &[&x, &y], vec![attr_int("fmod", 0)]);
            let d = b.binary("Sub", &x, &m);
            b.binary("Div", &d, &y)
        }
        BinaryOp::Div => b.binary("Div", &x, &y),
        // Integer powers with negative exponents are 1 for the CPU
        // (`wrapping_pow(max(e, 0))`); ONNX would truncate 1 / x^-e.
        BinaryOp::Pow if int => {
            let zero = b.i32s(&[], &[0]);
            let e = b.binary("Max", &y, &zero);
            b.binary("Pow", &x, &e)
        }
        BinaryOp::Pow => b.binary("Pow", &x, &y),
        BinaryOp::Max => b.binary("Max", &x, &y),
        BinaryOp::Min => b.binary("Min", &x, &y),
        BinaryOp::Eq => cmp(b, "Equal"),
        BinaryOp::Lt => cmp(b, "Less"),
        BinaryOp::Le => cmp(b, "LessOrEqual"),
        BinaryOp::Gt => cmp(b, "Greater"),
        BinaryOp::Ge => cmp(b, "GreaterOrEqual"),
        BinaryOp::Ne => {
            let e = b.binary("Equal", &x, &y);
            let n = b.node("Not", &[&e], vec![]);
            b.cast(&n, out_type)
        }
    })
}

/// `a` where `cond != 0`, else `b`; always float32.
pub fn where_(c: &mut Ctx, ins: &[ValueId]) -> Result<String> {
    let cond = c.value(ins[0])?;
    let (a, b) = (c.float(ins[1])?, c.float(ins[2])?);
    let cond = c.b.cast(&cond, DataType::Bool);
    Ok(c.b.node("Where", &[&cond, &a, &b], vec![]))
}

/// Our casts: to i32 truncates; to f16/bf16 rounds the values to that
/// type (they are carried as float32 afterwards, as our kernels widen them).
pub fn cast(c: &mut Ctx, x: ValueId, to: DType) -> Result<String> {
    let n = c.value(x)?;
    let int = c.is_int(x);
    Ok(match to {
        DType::I32 if int => n,
        DType::I32 => c.b.cast(&n, DataType::Int32),
        DType::F32 if int => c.b.cast(&n, DataType::Float),
        DType::F32 => n,
        DType::F16 | DType::BF16 => {
            let narrow = if to == DType::F16 {
                DataType::Float16
            } else {
                DataType::Bfloat16
            };
            let r = c.b.cast(&n, narrow);
            c.b.cast(&r, DataType::Float)
        }
        DType::Quant(_) => {
            return Err(crate::GraphError(format!(
                "a cast to {to} (only the converter quantizes)"
            )))
        }
    })
}

pub fn softmax(c: &mut Ctx, x: ValueId, dim: usize) -> Result<String> {
    let x = c.float(x)?;
    Ok(c.b.node("Softmax", &[&x], vec![attr_int("axis", dim as i64)]))
}

pub fn reduce(c: &mut Ctx, x: ValueId, op: ReduceOp, dim: usize, keepdim: bool) -> Result<String> {
    let x = c.float(x)?;
    let op_type = match op {
        ReduceOp::Sum => "ReduceSum",
        ReduceOp::Mean => "ReduceMean",
        ReduceOp::Max => "ReduceMax",
        ReduceOp::Min => "ReduceMin",
    };
    Ok(c.b.reduce(op_type, &x, &[dim as i64], keepdim))
}

/// First index of the maximum along `dim`, as int32.
pub fn argmax(c: &mut Ctx, x: ValueId, dim: usize) -> Result<String> {
    let x = c.float(x)?;
    let i = c.b.node(
        "ArgMax",
        &[&x],
        vec![
            attr_int("axis", dim as i64),
            attr_int("keepdims", 0),
            attr_int("select_last_index", 0),
        ],
    );
    Ok(c.b.cast(&i, DataType::Int32))
}
