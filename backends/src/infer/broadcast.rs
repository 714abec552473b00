//! Numpy broadcasting of shapes: the rule (`broadcast_shape`) and the
//! strides that walk an input as the broadcast output (`broadcast_strides`),
//! shared by the shape rules and every backend.

/// Numpy broadcast of two shapes, or `None` when they are incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Strides (in elements) that read `shape` as if it had `out`'s rank and
/// sizes: broadcast dimensions get stride 0.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut strides = vec![0; r];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        let oi = i + r - shape.len();
        strides[oi] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i];
    }
    strides
}
