//! The element-wise op families (unary maps, binary ops, reductions), each
//! defined once as a table. `unary_table!` is the one list of unary maps:
//! a row gives the variant, its name (the DSL builtin of that name, where
//! the language has one, is this op; OpenCL kernels are `map_unary_NAME`),
//! the input range its tests draw from, and its reference twin in f64, the
//! definition every backend's kernel is tested against and what a script
//! computes for a plain number. Other code derives what it needs from the
//! table by passing it a macro of its own (`unary_table!(my_macro)`), so a
//! new unary op is one row here plus the kernels that the compiler then
//! asks for (exhaustive matches in the CPU, OpenCL and ONNX code).

/// Calls `$then! { rows }` with every unary map. Rows read
/// `Variant = "name" { domain(lo, hi), twin F };` with docs above.
macro_rules! unary_table {
    ($then:ident) => {
        $then! {
            /// `-x` (the `-` operator).
            Neg = "neg" { domain(-5.0, 5.0), twin |x| -x };
            Exp = "exp" { domain(-10.0, 10.0), twin f64::exp };
            Log = "log" { domain(0.05, 8.0), twin f64::ln };
            Sqrt = "sqrt" { domain(0.0, 8.0), twin f64::sqrt };
            Rsqrt = "rsqrt" { domain(0.05, 8.0), twin |x| 1.0 / x.sqrt() };
            /// `1 / x` (no builtin: scripts write the division).
            Recip = "recip" { domain(0.2, 4.0), twin |x| 1.0 / x };
            Abs = "abs" { domain(-5.0, 5.0), twin f64::abs };
            Sin = "sin" { domain(-5.0, 5.0), twin f64::sin };
            Cos = "cos" { domain(-5.0, 5.0), twin f64::cos };
            Tanh = "tanh" { domain(-12.0, 12.0), twin f64::tanh };
            Sigmoid = "sigmoid" { domain(-12.0, 12.0), twin |x| 1.0 / (1.0 + (-x).exp()) };
            Relu = "relu" { domain(-5.0, 5.0), twin |x| x.max(0.0) };
            Silu = "silu" { domain(-12.0, 12.0), twin |x| x / (1.0 + (-x).exp()) };
            /// Exact GELU (erf form), as `nn.GELU()` / `gelu` in transformers.
            Gelu = "gelu" {
                domain(-5.0, 5.0),
                twin |x| 0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
            };
            /// GELU with the tanh approximation (`gelu_pytorch_tanh`).
            GeluTanh = "gelu_tanh" {
                domain(-5.0, 5.0),
                twin |x| {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
                }
            };
            /// `log(1 + e^x)`, and `x` itself above 20, as torch's
            /// `softplus` (beta 1, threshold 20): Mamba's and Gated
            /// DeltaNet's step sizes.
            Softplus = "softplus" {
                domain(-30.0, 30.0),
                twin |x| if x > 20.0 { x } else { x.exp().ln_1p() }
            };
        }
    };
}
#[cfg(feature = "opencl")]
pub(crate) use unary_table;

macro_rules! define_unary {
    ($( $(#[$doc:meta])* $v:ident = $name:literal {
        domain($lo:literal, $hi:literal), twin $twin:expr $(,)?
    };)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp {
            $($(#[$doc])* $v,)*
        }

        impl UnaryOp {
            /// Every unary map, in table order (`op as usize` indexes it).
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$v),*];

            /// The map's name (and its DSL builtin's, where it has one).
            pub const fn name(self) -> &'static str {
                match self {
                    $(UnaryOp::$v => $name,)*
                }
            }

            /// The unary map named `name` (a match the compiler builds,
            /// not a search: the interpreter asks on every builtin call).
            pub fn from_name(name: &str) -> Option<UnaryOp> {
                match name {
                    $($name => Some(UnaryOp::$v),)*
                    _ => None,
                }
            }

            /// The inputs its tests draw from: `lo..hi`, inside the map's
            /// domain and away from where f32 results lose all precision.
            pub const fn domain(self) -> (f64, f64) {
                match self {
                    $(UnaryOp::$v => ($lo, $hi),)*
                }
            }

            /// The reference twin: the map in f64.
            pub fn reference(self, x: f64) -> f64 {
                let f: fn(f64) -> f64 = match self {
                    $(UnaryOp::$v => $twin,)*
                };
                f(x)
            }
        }
    };
}

unary_table!(define_unary);

macro_rules! named_ops {
    ($(#[$tdoc:meta])* $ty:ident { $($(#[$doc:meta])* $v:ident = $name:literal,)* }) => {
        $(#[$tdoc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$doc])* $v,)*
        }

        impl $ty {
            /// Every variant, in declaration order (`op as usize` indexes it).
            pub const ALL: &'static [$ty] = &[$($ty::$v),*];

            pub const fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)*
                }
            }
        }
    };
}

named_ops! {
    /// Broadcasting binary ops; OpenCL kernels are `map_bin_NAME[_nd|_i32]`.
    BinaryOp {
        Add = "add",
        Sub = "sub",
        Mul = "mul",
        Div = "div",
        Pow = "pow",
        Max = "max",
        Min = "min",
        Eq = "eq",
        Ne = "ne",
        Lt = "lt",
        Le = "le",
        Gt = "gt",
        Ge = "ge",
    }
}

named_ops! {
    /// Reductions over one dimension.
    ReduceOp {
        Sum = "sum",
        Mean = "mean",
        Max = "max",
        Min = "min",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_indexed_by_variant_and_names_are_unique() {
        for (i, u) in UnaryOp::ALL.iter().enumerate() {
            assert_eq!(*u as usize, i);
            assert_eq!(UnaryOp::from_name(u.name()), Some(*u));
            let (lo, hi) = u.domain();
            assert!(lo < hi, "{u:?}");
            assert!(u.reference((lo + hi) / 2.0).is_finite(), "{u:?}");
        }
        for (i, b) in BinaryOp::ALL.iter().enumerate() {
            assert_eq!(*b as usize, i);
        }
        for (i, r) in ReduceOp::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }

    #[test]
    fn softplus_follows_torch() {
        let s = |x| UnaryOp::Softplus.reference(x);
        assert_eq!(s(0.0), 2f64.ln());
        assert_eq!(s(25.0), 25.0); // above the threshold: x itself
        assert!((s(-30.0) - (-30f64).exp()).abs() < 1e-25);
        assert!((s(20.0) - 20.0) < 3e-9 && s(20.0) > 20.0);
    }
}
