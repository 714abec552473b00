//! The OpenCL C sources, embedded at build time. `COMMON` (helpers: block
//! dequantization, f16 loads) is prepended to each program.

pub const COMMON: &str = include_str!("kernels/common.cl");

/// The source of program `name`.
pub fn source(name: &str) -> Option<&'static str> {
    Some(match name {
        "map" => include_str!("kernels/map.cl"),
        "reduce" => include_str!("kernels/reduce.cl"),
        "norm" => include_str!("kernels/norm.cl"),
        "shape" => include_str!("kernels/shape.cl"),
        "linear" => include_str!("kernels/linear.cl"),
        "attention" => include_str!("kernels/attention.cl"),
        _ => return None,
    })
}

/// Every program, for tests that build them all.
pub const PROGRAMS: &[&str] = &["map", "reduce", "norm", "shape", "linear", "attention"];
