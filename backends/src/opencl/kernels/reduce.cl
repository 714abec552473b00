// Kernels of the reduce family: softmax, sum / mean / max / min and argmax
// along one dimension of any rank.
//
// Layout: the input is viewed as [outer, n, inner] around the reduced
// dimension (n values `inner` apart). A work-group is a 2-D tile of
// LX x LY work-items (LX * LY = 64 by default, both powers of two, chosen by
// the launcher): LX consecutive columns `i` of `inner` side by side, and LY
// work-items splitting the reduced dimension between them (work-item `ly`
// takes j = ly, ly + LY, ...). Consecutive work-items of one row of the tile
// read consecutive addresses when inner > 1 (columns) and when inner == 1
// (LX = 1, LY = 64: the 64 work-items stride along the contiguous row), so
// loads are coalesced in both cases. Partial results meet in local memory
// (LX * LY floats, plus as many ints for argmax) through a tree over LY.
// grid = (inner rounded up to LX, LY, outer).
//
// Mobile GPUs (Adreno, Mali) want exactly this: small work-groups (64 fits
// every wave/warp size), no more than a few hundred bytes of local memory
// per group, and many groups for the scheduler when outer * inner is large.
// Arithmetic is f32; the input may be f32, f16 or i32 (`xt`: 0, 1, 2),
// widened at load as the CPU widens it (`Tensor::to_f32`).

inline float red_load(global const uchar* x, int xt, long i) {
    if (xt == 1) return vload_half(i, (global const half*)x);
    if (xt == 2) return (float)((global const int*)x)[i];
    return ((global const float*)x)[i];
}

#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3

inline float red_init(int op) {
    if (op == RED_MAX) return -INFINITY;
    if (op == RED_MIN) return INFINITY;
    return 0.0f;
}

// fmax / fmin skip NaN as Rust's f32::max / f32::min do.
inline float red_step(int op, float a, float b) {
    if (op == RED_MAX) return fmax(a, b);
    if (op == RED_MIN) return fmin(a, b);
    return a + b;
}

// Tree over the LY work-items of column lx; the result lands in red[lx]
// (row 0 of the tile). Every work-item of the group must call it.
inline void red_tree(local float* red, int op, int lx, int ly, int LX, int LY) {
    for (int s = LY / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (ly < s) {
            red[ly * LX + lx] = red_step(op, red[ly * LX + lx], red[(ly + s) * LX + lx]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

kernel void reduce_reduce(global const uchar* x, int xo, int xt, int outer, int n, int inner,
                          int op, global float* out, local float* red) {
    int i = get_global_id(0), o = get_global_id(2);
    int lx = get_local_id(0), ly = get_local_id(1);
    int LX = get_local_size(0), LY = get_local_size(1);
    float acc = red_init(op);
    if (i < inner) {
        long base = (long)xo + (long)o * n * inner + i;
        for (int j = ly; j < n; j += LY) acc = red_step(op, acc, red_load(x, xt, base + (long)j * inner));
    }
    red[ly * LX + lx] = acc;
    red_tree(red, op, lx, ly, LX, LY);
    if (ly == 0 && i < inner) {
        float r = red[lx];
        if (op == RED_MEAN) r = r / (float)n;
        out[(long)o * inner + i] = r;
    }
}

// First index of the largest value; NaN never wins (comparisons with NaN
// are false), and a column without any value above -inf answers 0, as the
// CPU's `v > best` scan starting from -inf does.
kernel void reduce_argmax(global const uchar* x, int xo, int xt, int outer, int n, int inner,
                          global int* out, local float* bv, local int* bi) {
    int i = get_global_id(0), o = get_global_id(2);
    int lx = get_local_id(0), ly = get_local_id(1);
    int LX = get_local_size(0), LY = get_local_size(1);
    float best = -INFINITY;
    int at = INT_MAX; // none yet
    if (i < inner) {
        long base = (long)xo + (long)o * n * inner + i;
        for (int j = ly; j < n; j += LY) {
            float v = red_load(x, xt, base + (long)j * inner);
            if (v > best) {
                best = v;
                at = j;
            }
        }
    }
    int t = ly * LX + lx;
    bv[t] = best;
    bi[t] = at;
    for (int s = LY / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (ly < s) {
            int u = (ly + s) * LX + lx;
            // Larger value wins; equal values keep the earlier index.
            if (bv[u] > bv[t] || (bv[u] == bv[t] && bi[u] < bi[t])) {
                bv[t] = bv[u];
                bi[t] = bi[u];
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ly == 0 && i < inner) {
        out[(long)o * inner + i] = bi[lx] == INT_MAX ? 0 : bi[lx];
    }
}

// Softmax: the column's max, then the sum of exp(x - max), then each value
// (three passes over the input; the second and third re-read it rather than
// keep n values per work-item).
kernel void reduce_softmax(global const float* x, int xo, int outer, int n, int inner,
                           global float* out, local float* red) {
    int i = get_global_id(0), o = get_global_id(2);
    int lx = get_local_id(0), ly = get_local_id(1);
    int LX = get_local_size(0), LY = get_local_size(1);
    long base = (long)o * n * inner + i;
    bool live = i < inner;
    float mx = -INFINITY;
    if (live) {
        for (int j = ly; j < n; j += LY) mx = fmax(mx, x[xo + base + (long)j * inner]);
    }
    red[ly * LX + lx] = mx;
    red_tree(red, RED_MAX, lx, ly, LX, LY);
    mx = red[lx];
    barrier(CLK_LOCAL_MEM_FENCE); // everyone has read the max before reuse
    float sum = 0.0f;
    if (live) {
        for (int j = ly; j < n; j += LY) sum += exp(x[xo + base + (long)j * inner] - mx);
    }
    red[ly * LX + lx] = sum;
    red_tree(red, RED_SUM, lx, ly, LX, LY);
    sum = red[lx];
    if (live) {
        for (int j = ly; j < n; j += LY) {
            long at = base + (long)j * inner;
            out[at] = exp(x[xo + at] - mx) / sum;
        }
    }
}
