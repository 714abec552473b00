//! `Op::MoeLinear`: each (token, slot) row multiplied by the weight of the
//! expert its id names. The fast path groups the rows by expert (a
//! counting sort of the ids), gathers each expert's rows into one
//! contiguous block, and runs the very kernels `Op::Linear` uses on it
//! (`qlinear::linear_into` with its activation quantization and repacked
//! weights, `linear::linear_into` for floats), then scatters the results
//! to their rows. Experts no row picked cost nothing.
//!
//! Work is one pool dispatch over (expert, block of weight rows) tasks,
//! sized by each expert's share of the multiply-adds, so a decode step
//! (a few rows per expert) and a prefill (many) both keep every thread
//! busy; inside a task the linear runs on its own thread (the pool runs
//! nested loops serially). A task recomputes its rows' activation
//! quantization: `m * k` against the `m * rows * k` multiply-adds it does.
//!
//! Expert weights come as one `[e, n, k]` tensor (expert `i` is rows
//! `i * n ..` of it, whole blocks, or whole 16-row groups once
//! `prepare_weight` interleaved it) or as `e` tensors `[n, k]`.

use std::cell::Cell;

use super::qlinear::{self, SendPtr};
use super::{linear, simd};
use crate::dtype::DType;
use crate::error::{invalid, shape_err, BackendError, Result};
use crate::quant::{self, packed, QuantType};
use crate::tensor::{FloatSlice, Tensor};

/// One expert's weight `[n, k]`.
#[derive(Clone, Copy)]
enum ExpertW<'a> {
    Float(FloatSlice<'a>),
    Quant(&'a [u8], QuantType),
}

/// The expert weights of one call, and their shape.
struct Experts<'a> {
    ws: &'a [&'a Tensor],
    e: usize,
    n: usize,
    k: usize,
}

impl<'a> Experts<'a> {
    fn of(ws: &'a [&'a Tensor]) -> Result<Experts<'a>> {
        let (e, n, k) = match ws {
            [w] if w.rank() == 3 => (w.shape()[0], w.shape()[1], w.shape()[2]),
            [first, ..] if first.rank() == 2 => (ws.len(), first.shape()[0], first.shape()[1]),
            _ => return shape_err("moe_linear", "expert weights of no known layout"),
        };
        Ok(Experts { ws, e, n, k })
    }

    /// Expert `i`'s weight rows.
    fn weight(&self, i: usize) -> Result<ExpertW<'a>> {
        let (w, at) = if self.ws.len() == 1 && self.ws[0].rank() == 3 {
            (self.ws[0], i)
        } else {
            (self.ws[i], 0)
        };
        match w.dtype() {
            DType::Quant(_) => {
                let (bytes, ty) = w.quant_bytes()?;
                let Some(rb) = DType::Quant(ty).row_bytes(self.k) else {
                    return shape_err(
                        "moe_linear",
                        format!("rows of {} are not whole {ty} blocks", self.k),
                    );
                };
                let len = self.n * rb;
                match bytes.get(at * len..(at + 1) * len) {
                    Some(b) => Ok(ExpertW::Quant(b, ty)),
                    None => invalid("moe_linear", format!("expert {i} is outside its weight")),
                }
            }
            _ => {
                let f = w.floats()?;
                let len = self.n * self.k;
                if (at + 1) * len > f.len() {
                    return invalid("moe_linear", format!("expert {i} is outside its weight"));
                }
                Ok(ExpertW::Float(f.sub(at * len, len)))
            }
        }
    }
}

/// The ids as expert indexes, or an error naming the first one outside
/// `0..e`.
fn expert_ids(ids: &[i32], slots: usize, e: usize) -> Result<Vec<u32>> {
    ids.iter()
        .enumerate()
        .map(|(p, &id)| match usize::try_from(id) {
            Ok(x) if x < e => Ok(x as u32),
            _ => invalid(
                "moe_linear",
                format!(
                    "expert id {id} (token {}, slot {}) is outside the {e} experts",
                    p / slots.max(1),
                    p % slots.max(1)
                ),
            ),
        })
        .collect()
}

/// Row `p` (= token * slots + slot) of the activations.
fn x_row(x: &[f32], k: usize, slots: usize, shared: bool, p: usize) -> &[f32] {
    let r = if shared { p / slots } else { p };
    &x[r * k..(r + 1) * k]
}

/// `out [rows, nr] = x [rows, k] @ w[j0 .. j0 + nr]^T` with `Linear`'s kernels.
fn expert_rows(
    w: ExpertW,
    x: &[f32],
    rows: usize,
    k: usize,
    j0: usize,
    nr: usize,
    out: &mut [f32],
) -> Result<()> {
    match w {
        ExpertW::Quant(bytes, ty) => {
            let Some(rb) = DType::Quant(ty).row_bytes(k) else {
                return shape_err(
                    "moe_linear",
                    format!("rows of {k} are not whole {ty} blocks"),
                );
            };
            // Expert weights hold `n * rb` bytes and `j0 + nr <= n`.
            qlinear::linear_into(
                x,
                rows,
                k,
                &bytes[j0 * rb..(j0 + nr) * rb],
                ty,
                nr,
                None,
                out,
            )
        }
        ExpertW::Float(f) => {
            linear::linear_into(x, rows, k, f.sub(j0 * k, nr * k), nr, None, out);
            Ok(())
        }
    }
}

thread_local! {
    /// A task's `[rows, nr]` result before it is scattered.
    static STAGE: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// The calling thread's rows gathered by expert, reused from call to
    /// call (a compiled step then allocates no activation-sized buffer).
    static GATHERED: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// One task: weight rows `j0 .. j0 + nr` of expert `ex` for its rows.
#[derive(Clone, Copy)]
struct Task {
    ex: usize,
    j0: usize,
    nr: usize,
}

/// Below this many multiply-adds one thread does the whole op.
const PAR_MACS: usize = 1 << 19;

/// `Op::MoeLinear` over its inputs into `out` (`[t, s, n]`, zeroed or
/// not: every value is written). Shapes were checked by `Op::infer`.
pub fn moe_linear_into(inputs: &[&Tensor], out: &mut [f32]) -> Result<()> {
    let (x, ids) = (inputs[0], inputs[1]);
    let ex = Experts::of(&inputs[2..])?;
    let (t, s) = (ids.shape()[0], ids.shape()[1]);
    let n = ex.n;
    let shared = x.rank() == 2;
    let xs = super::f32_of("moe_linear", x)?;
    let pairs = t * s;
    if out.len() != pairs * n {
        return invalid(
            "moe_linear",
            format!("an output of {} values for [{t}, {s}, {n}]", out.len()),
        );
    }
    let which = expert_ids(ids.i32s()?, s, ex.e)?;
    if pairs == 0 || n == 0 {
        return Ok(());
    }
    // Counting sort: the rows of each expert, in row order.
    let mut start = vec![0usize; ex.e + 1];
    for &w in &which {
        start[w as usize + 1] += 1;
    }
    for i in 0..ex.e {
        start[i + 1] += start[i];
    }
    let mut order = vec![0u32; pairs];
    let mut fill = start.clone();
    for (p, &w) in which.iter().enumerate() {
        order[fill[w as usize]] = p as u32;
        fill[w as usize] += 1;
    }
    let mut buf = GATHERED.take();
    let r = grouped(&ex, xs, shared, s, &start, &order, &mut buf, out);
    GATHERED.set(buf);
    r
}

/// The rows of each expert (`order[start[e]..start[e + 1]]`) gathered into
/// `buf`, multiplied by their expert's weight, scattered into `out`.
#[allow(clippy::too_many_arguments)]
fn grouped(
    ex: &Experts,
    xs: &[f32],
    shared: bool,
    s: usize,
    start: &[usize],
    order: &[u32],
    buf: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<()> {
    let (n, k, pairs) = (ex.n, ex.k, order.len());
    // The rows gathered expert after expert: `[pairs, k]`.
    let gathered = super::refill(buf, pairs * k, 0.0);
    let copy = |c: usize, chunk: &mut [f32]| {
        let first = c * GATHER_ROWS;
        for (r, dst) in chunk.chunks_exact_mut(k.max(1)).enumerate() {
            dst.copy_from_slice(x_row(xs, k, s, shared, order[first + r] as usize));
        }
    };
    if pairs * k >= 1 << 16 && k > 0 {
        super::pool::for_chunks(gathered, GATHER_ROWS * k, copy);
    } else if k > 0 {
        for (c, chunk) in gathered.chunks_mut(GATHER_ROWS * k).enumerate() {
            copy(c, chunk);
        }
    }
    let weights: Vec<Option<ExpertW>> = (0..ex.e)
        .map(|i| (start[i + 1] > start[i]).then(|| ex.weight(i)).transpose())
        .collect::<Result<_>>()?;
    let tasks = plan(start, n, k, weights.iter().any(is_packed));
    let dst = SendPtr(out.as_mut_ptr());
    let run = |task: &Task| -> Result<()> {
        let (lo, hi) = (start[task.ex], start[task.ex + 1]);
        let rows = hi - lo;
        let Some(w) = weights[task.ex] else {
            return Ok(());
        };
        let mut stage = STAGE.take();
        let y = super::refill(&mut stage, rows * task.nr, 0.0);
        let r = expert_rows(w, &gathered[lo * k..hi * k], rows, k, task.j0, task.nr, y);
        if r.is_ok() {
            for (yr, &p) in y.chunks_exact(task.nr).zip(&order[lo..hi]) {
                // SAFETY: row p's columns j0..j0+nr belong to this task
                // alone (each row has one expert; tasks of an expert own
                // disjoint column blocks), and lie inside `out`.
                let o = unsafe {
                    std::slice::from_raw_parts_mut(dst.get().add(p as usize * n + task.j0), task.nr)
                };
                o.copy_from_slice(yr);
            }
        }
        STAGE.set(stage);
        r
    };
    let macs = pairs * n * k;
    if macs < PAR_MACS || tasks.len() == 1 {
        return tasks.iter().try_for_each(run);
    }
    let failed = std::sync::Mutex::new(None);
    super::pool::for_each(tasks.len(), |i| {
        if let Err(e) = run(&tasks[i]) {
            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Rows per gather task.
const GATHER_ROWS: usize = 64;

fn is_packed(w: &Option<ExpertW>) -> bool {
    matches!(w, Some(ExpertW::Quant(_, ty)) if ty.is_packed())
}

/// The tasks: each expert with rows is split into blocks of weight rows in
/// proportion to its share of the work (about four tasks per thread in
/// all), blocks a multiple of 16 rows (interleaved weights' groups; the
/// kernels' row tiles) except an expert's last.
fn plan(start: &[usize], n: usize, k: usize, packed: bool) -> Vec<Task> {
    let pairs = start[start.len() - 1];
    let threads = rayon::current_num_threads().max(1);
    let target = (pairs * n * k).div_ceil(threads * 4).max(PAR_MACS / 4);
    let mut tasks = vec![];
    for ex in 0..start.len() - 1 {
        let rows = start[ex + 1] - start[ex];
        if rows == 0 {
            continue;
        }
        let blocks = (rows * n * k).div_ceil(target).clamp(1, n.div_ceil(16));
        let mut per = n.div_ceil(blocks).next_multiple_of(16);
        if packed && !n.is_multiple_of(16) {
            per = n; // the kernel refuses it anyway; one task says why
        }
        let mut j0 = 0;
        while j0 < n {
            let nr = per.min(n - j0);
            tasks.push(Task { ex, j0, nr });
            j0 += nr;
        }
    }
    tasks
}

/// Expert `w` as f32 `[n, k]` (the reference twin's view).
fn dequantized(w: ExpertW, n: usize, k: usize) -> Result<Vec<f32>> {
    let err = |msg| BackendError::Invalid {
        op: "moe_linear",
        msg,
    };
    match w {
        ExpertW::Float(f) => Ok(f.to_vec()),
        ExpertW::Quant(b, ty) if ty.is_packed() => packed::dequantize(ty, b, n, k).map_err(err),
        ExpertW::Quant(b, ty) => quant::dequantize(ty, b, n * k).map_err(err),
    }
}

/// Reference twin: for every (token, slot), the reference linear of its
/// row against its expert's weight (dequantized to f32, once per expert).
pub fn moe_linear_ref(inputs: &[&Tensor]) -> Result<Vec<f32>> {
    let (x, ids) = (inputs[0], inputs[1]);
    let ex = Experts::of(&inputs[2..])?;
    let (t, s) = (ids.shape()[0], ids.shape()[1]);
    let (n, k) = (ex.n, ex.k);
    let xs = super::f32_of("moe_linear", x)?;
    let which = expert_ids(ids.i32s()?, s, ex.e)?;
    let mut cache: Vec<Option<Vec<f32>>> = vec![None; ex.e];
    let mut out = vec![0.0f32; t * s * n];
    for (p, &w) in which.iter().enumerate() {
        let w = w as usize;
        if cache[w].is_none() {
            cache[w] = Some(dequantized(ex.weight(w)?, n, k)?);
        }
        let wf = cache[w].as_deref().unwrap_or_default();
        let row = x_row(xs, k, s, x.rank() == 2, p);
        for j in 0..n {
            out[p * n + j] = simd::dot_ref(row, &wf[j * k..(j + 1) * k]);
        }
    }
    Ok(out)
}
