// Kernels of the shape family: permute (general N-d gather and a tiled
// transpose), concat, strided slice and index select. Reshapes and
// dim-0 unit-step slices are views and launch nothing.
//
// Design:
// - Every output element is 32 bits: layout ops keep i32 and widen floats
//   to f32 (`keep_int` in infer.rs). Inputs are read through `shape_ld`
//   with a `mode` argument: 0 copies the 32-bit word (f32 -> f32, i32 ->
//   i32: one kernel serves both, no conversion), 1 widens f16 (vload_half,
//   no cl_khr_fp16 needed), 2 converts i32 to f32 (a concat that mixes i32
//   with floats). The branch is uniform across the launch, so it costs a
//   GPU nothing measurable; it saves compiling three copies of each kernel.
// - Work-items map to OUTPUT elements with the innermost output index
//   fastest, so stores are always coalesced; loads are coalesced whenever
//   the innermost dim is kept (slice/concat/index-select copy whole inner
//   runs; the launcher collapses permutes so a kept inner dim is one run).
// - Permute: the launcher drops size-1 dims and merges dims that stay
//   adjacent, then passes up to SHAPE_MAX_RANK sizes and source strides as
//   scalar arguments (no extra buffer, no upload per launch). When the
//   result is a batched 2-D transpose ([b, m, n] -> [b, n, m], the common
//   case: K^T, head-major <-> seq-major) a 16x16 tile goes through local
//   memory (padded to 17 columns against bank conflicts) so that both the
//   loads and the stores are coalesced: 16x17 floats = 1 KiB, which fits
//   Adreno's and Mali's local memory with room for several groups per core.
// - Indices are `int`: launchers refuse tensors of 2^31 elements or more.

#define SHAPE_MAX_RANK 6
#define SHAPE_TILE 16

inline uint shape_ld(global const uchar* x, int mode, int i) {
    if (mode == 1) return as_uint(vload_half(i, (global const half*)x));
    uint v = ((global const uint*)x)[i];
    return mode == 2 ? as_uint((float)as_int(v)) : v;
}

// Plain copy/convert of n elements (identity permutes, whole-tensor
// conversions).
kernel void shape_copy(global const uchar* x, int xoff, int mode,
                       global uint* y, int n) {
    int i = get_global_id(0);
    if (i < n) y[i] = shape_ld(x, mode, xoff + i);
}

// General permute: output element i, whose index digits over the output
// sizes s0..s5 (s5 innermost; unused outer dims have size 1) give the
// source offset through the source strides t0..t5.
kernel void shape_permute(global const uchar* x, int xoff, int mode,
                          global uint* y, int n,
                          int s0, int s1, int s2, int s3, int s4, int s5,
                          int t0, int t1, int t2, int t3, int t4, int t5) {
    int i = get_global_id(0);
    if (i >= n) return;
    int r = i, src = 0;
    src += (r % s5) * t5; r /= s5;
    src += (r % s4) * t4; r /= s4;
    src += (r % s3) * t3; r /= s3;
    src += (r % s2) * t2; r /= s2;
    src += (r % s1) * t1; r /= s1;
    src += r * t0;
    (void)s0;
    y[i] = shape_ld(x, mode, xoff + src);
}

// [b, m, n] -> [b, n, m] through a local tile. Range: (ceil(n/16)*16,
// ceil(m/16)*16, b) with 16x16 groups: the group reads a 16x16 block of
// rows of x (coalesced along n), then writes it transposed (coalesced
// along m).
kernel void shape_transpose(global const uchar* x, int xoff, int mode,
                            global uint* y, int m, int n) {
    local uint tile[SHAPE_TILE][SHAPE_TILE + 1];
    int lx = get_local_id(0), ly = get_local_id(1);
    int bx = get_group_id(0) * SHAPE_TILE, by = get_group_id(1) * SHAPE_TILE;
    int b = get_global_id(2);
    int base = b * m * n;
    int col = bx + lx, row = by + ly;   // source (row < m, col < n)
    if (row < m && col < n) tile[ly][lx] = shape_ld(x, mode, xoff + base + row * n + col);
    barrier(CLK_LOCAL_MEM_FENCE);
    int orow = bx + ly, ocol = by + lx; // destination (orow < n, ocol < m)
    if (orow < n && ocol < m) y[base + orow * m + ocol] = tile[lx][ly];
}

// Concat, one launch per input: x viewed as [outer, w] (w = its size along
// the dim times the inner size) lands in columns at..at+w of y viewed as
// [outer, pitch]. Range: (w, outer).
kernel void shape_concat(global const uchar* x, int xoff, int mode,
                         global uint* y, int w, int outer, int pitch, int at) {
    int j = get_global_id(0), o = get_global_id(1);
    if (j >= w || o >= outer) return;
    y[o * pitch + at + j] = shape_ld(x, mode, xoff + o * w + j);
}

// Strided slice of x viewed as [outer, n, inner]: out [outer, cnt, inner],
// out[o, k, i] = x[o, start + k * step, i]. Range: (cnt * inner, outer).
kernel void shape_slice(global const uchar* x, int xoff, int mode,
                        global uint* y, int outer, int n, int inner,
                        int cnt, int start, int step) {
    int j = get_global_id(0), o = get_global_id(1);
    int w = cnt * inner;
    if (j >= w || o >= outer) return;
    int k = j / inner, i = j - k * inner;
    int src = (o * n + start + k * step) * inner + i;
    y[o * w + j] = shape_ld(x, mode, xoff + src);
}

// Index select of x viewed as [outer, n, inner] with `cnt` indexes
// (checked in range by the launcher): out[o, k, i] = x[o, idx[k], i].
// Range: (cnt * inner, outer).
kernel void shape_index_select(global const uchar* x, int xoff, int mode,
                               global const int* idx, int ioff,
                               global uint* y, int outer, int n, int inner,
                               int cnt) {
    int j = get_global_id(0), o = get_global_id(1);
    int w = cnt * inner;
    if (j >= w || o >= outer) return;
    int k = j / inner, i = j - k * inner;
    int src = (o * n + idx[ioff + k]) * inner + i;
    y[o * w + j] = shape_ld(x, mode, xoff + src);
}
