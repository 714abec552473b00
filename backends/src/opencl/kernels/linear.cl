// Kernels of the linear family: `linear` (x @ w^T + b) for every device
// weight dtype, batched `matmul`, the pieces of `merged_linear` (an RMSNorm
// of the rows into a scratch buffer, then one linear per part writing at
// its offset of the one output) and `embedding` (row gather).
//
// Design:
// - Per weight type, kernels are stamped out by the `LINEAR_STAMP` macro at
//   the end (`linear_gemv_q4_0`, `linear_gemm_q4_0`, `linear_embed_q4_0`,
//   ...). Each calls a generic inline body with the weight type as a
//   literal `const int wt`, so after inlining every `switch (wt)` folds
//   away: no runtime type switch survives in an inner loop.
// - Weights are addressed as bytes: a weight row is `k / wt_vals(wt)`
//   units of `wt_bytes(wt)` bytes (f32: 1 value in 4 bytes, q4_0: 32 values
//   in 18 bytes, q6_K: 256 values in 210 bytes; q4_K 144, q5_K 176). Offsets arrive in units of
//   the dtype (elements for floats, blocks for ggml types) so that a weight
//   view never needs a sub-buffer.
// - GEMV (decode, at most GEMV_R = 4 rows): one work-group of GEMV_WG = 64
//   threads per output feature. The threads stride over k (floats: one
//   value each, so a warp reads one contiguous run; ggml types: one
//   32-value unit each, dequantized with 16-wide vector ops into two
//   float16 registers and reused for every row of x), so each weight is
//   read exactly once, then the per-thread sums are reduced in local
//   memory. 64 threads is one wave on Adreno (wave 64/128), two warps on
//   NVIDIA and a few Mali warps (16-wide); the 4x64 floats of local memory
//   fit any device.
// - GEMM (prefill): 64x64 output tiles per 16x16 work-group, each thread
//   computing a 4x4 grid of outputs (strided by 16 so that stores
//   coalesce). Each step stages a 64x32 tile of x and of the dequantized
//   weight in local memory (rows padded to 33 floats: no bank conflicts on
//   the column reads), so each weight value is dequantized once per tile
//   instead of once per output row. 2 x 64 x 33 floats = 16.9 KB of local
//   memory, within the 32 KB that Adreno and Mali guarantee. 32 is the
//   ggml block size, so a k step never splits a block (the K-quants'
//   256-value super-blocks split into eight 32-value units: q6_K's share
//   scales in pairs, q4_K's and q5_K's have one 6-bit scale and min each).
// - Matmul uses the same tiles with b read as [k, n] (the tile loader walks
//   n fastest for coalescing); f16 / i32 operands are widened into a
//   scratch f32 buffer first (rare: attention uses `sdpa`).
// - All arithmetic is f32; f16 is only loaded (vload_half).

#define GEMV_WG 64
#define GEMV_R 4
#define TILE 64
#define TK 32
#define TKP 33
#define GEMM_T 16

// ---------------------------------------------------------------------------
// Weight-type helpers (wt is a literal at every call site).

inline int wt_vals(const int wt) {
    switch (wt) {
    case WT_F32:
    case WT_F16: return 1;
    case WT_Q6_K:
    case WT_Q4_K:
    case WT_Q5_K: return 256;
    default: return 32;
    }
}

inline int wt_bytes(const int wt) {
    switch (wt) {
    case WT_F32: return 4;
    case WT_F16: return 2;
    case WT_Q4_0: return 18;
    case WT_Q4_1: return 20;
    case WT_Q8_0: return 34;
    case WT_Q4_K: return 144;
    case WT_Q5_K: return 176;
    default: return 210;
    }
}

// Value `i` of the weight row starting at byte `row`.
inline float w_at(const int wt, global const uchar* row, int i) {
    switch (wt) {
    case WT_F32: return ((global const float*)row)[i];
    case WT_F16: return vload_half(i, (global const half*)row);
    case WT_Q4_0: return q4_0_at(row + (i >> 5) * 18, i & 31);
    case WT_Q4_1: return q4_1_at(row + (i >> 5) * 20, i & 31);
    case WT_Q8_0: return q8_0_at(row + (i >> 5) * 34, i & 31);
    case WT_Q4_K: return q4_k_at(row + (i >> 8) * 144, i & 255);
    case WT_Q5_K: return q5_k_at(row + (i >> 8) * 176, i & 255);
    default: return q6_k_at(row + (i >> 8) * 210, i & 255);
    }
}

inline float hsum16(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    return (b.x + b.y) + (b.z + b.w);
}

// The 32 values of unit `u` (values 32u .. 32u + 31) of a ggml-typed row,
// as values 0..15 in `lo` and 16..31 in `hi`.
inline void deq32(const int wt, global const uchar* row, int u, float16* lo, float16* hi) {
    if (wt == WT_Q4_0 || wt == WT_Q4_1) {
        global const uchar* b = row + u * wt_bytes(wt);
        float d = ld_half(b);
        float m = wt == WT_Q4_1 ? ld_half(b + 2) : -8.0f * d;
        uchar16 q = vload16(0, b + (wt == WT_Q4_1 ? 4 : 2));
        *lo = d * convert_float16(q & (uchar16)(15)) + m;
        *hi = d * convert_float16(q >> (uchar16)(4)) + m;
    } else if (wt == WT_Q8_0) {
        global const uchar* b = row + u * 34;
        float d = ld_half(b);
        global const char* q = (global const char*)(b + 2);
        *lo = d * convert_float16(vload16(0, q));
        *hi = d * convert_float16(vload16(1, q));
    } else if (wt == WT_Q4_K || wt == WT_Q5_K) {
        // q4_K / q5_K: unit s of 8 in the super-block, with its own 6-bit
        // scale and min; units 2g and 2g + 1 share 32 bytes of nibbles.
        global const uchar* b = row + (u >> 3) * wt_bytes(wt);
        int s = u & 7;
        float sc, mn;
        k4_scale_min(b + 4, s, &sc, &mn);
        float d = ld_half(b) * sc, m = ld_half(b + 2) * mn;
        global const uchar* qs = b + (wt == WT_Q5_K ? 48 : 16) + (s >> 1) * 32;
        uchar16 sh = (uchar16)((uchar)((s & 1) * 4)), m4 = (uchar16)(15);
        uchar16 q0 = (vload16(0, qs) >> sh) & m4;
        uchar16 q1 = (vload16(1, qs) >> sh) & m4;
        if (wt == WT_Q5_K) {
            global const uchar* qh = b + 16;
            uchar16 hs = (uchar16)((uchar)s), one = (uchar16)(1);
            q0 |= ((vload16(0, qh) >> hs) & one) << (uchar16)(4);
            q1 |= ((vload16(1, qh) >> hs) & one) << (uchar16)(4);
        }
        *lo = d * convert_float16(q0) - m;
        *hi = d * convert_float16(q1) - m;
    } else {
        // q6_K: unit s of 8 in the super-block; halves of 128 values hold
        // four 32-value quarters that share one row of ql / qh bytes.
        global const uchar* b = row + (u >> 3) * 210;
        int s = u & 7, h = s >> 2, qt = s & 3;
        global const uchar* ql = b + h * 64 + (qt & 1) * 32;
        global const uchar* qh = b + 128 + h * 32;
        global const char* sc = (global const char*)(b + 192) + h * 8 + qt * 2;
        float d = ld_half(b + 208);
        uchar16 lsh = (uchar16)((uchar)((qt >> 1) * 4));
        uchar16 hsh = (uchar16)((uchar)(2 * qt));
        uchar16 m4 = (uchar16)(15), m2 = (uchar16)(3);
        uchar16 q0 = ((vload16(0, ql) >> lsh) & m4) | (((vload16(0, qh) >> hsh) & m2) << (uchar16)(4));
        uchar16 q1 = ((vload16(1, ql) >> lsh) & m4) | (((vload16(1, qh) >> hsh) & m2) << (uchar16)(4));
        *lo = (d * (float)sc[0]) * (convert_float16(q0) - 32.0f);
        *hi = (d * (float)sc[1]) * (convert_float16(q1) - 32.0f);
    }
}

// Bias `j` (kind 0: none, 1: f32, 2: f16), added once per output.
inline float bias_at(global const uchar* b, uint b_off, int kind, int j) {
    if (kind == 1) return ((global const float*)b)[b_off + j];
    if (kind == 2) return vload_half(b_off + j, (global const half*)b);
    return 0.0f;
}

// ---------------------------------------------------------------------------
// GEMV: rows <= GEMV_R, one work-group per output feature j.

inline void gemv_body(const int wt, global const float* x, uint x_off, global const uchar* w,
                      uint w_off, global const uchar* bias, uint b_off, int bias_kind,
                      global float* y, uint y_off, int rows, int k, int n, local float* red) {
    int j = get_group_id(0);
    int lid = get_local_id(0);
    if (j >= n) return; // uniform over the work-group
    ulong row_bytes = (ulong)(k / wt_vals(wt)) * wt_bytes(wt);
    global const uchar* row = w + (ulong)w_off * wt_bytes(wt) + (ulong)j * row_bytes;
    x += x_off;
    float acc[GEMV_R] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (wt == WT_F32 || wt == WT_F16) {
        for (int i = lid; i < k; i += GEMV_WG) {
            float wv = w_at(wt, row, i);
#pragma unroll
            for (int r = 0; r < GEMV_R; r++)
                if (r < rows) acc[r] += wv * x[r * k + i];
        }
    } else {
        for (int u = lid; u < (k >> 5); u += GEMV_WG) {
            float16 lo, hi;
            deq32(wt, row, u, &lo, &hi);
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) {
                if (r < rows) {
                    global const float* xr = x + r * k + u * 32;
                    acc[r] += hsum16(lo * vload16(0, xr) + hi * vload16(1, xr));
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GEMV_R; r++) red[r * GEMV_WG + lid] = acc[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = GEMV_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
#pragma unroll
            for (int r = 0; r < GEMV_R; r++) red[r * GEMV_WG + lid] += red[r * GEMV_WG + lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < rows)
        y[y_off + (ulong)lid * n + j] = red[lid * GEMV_WG] + bias_at(bias, b_off, bias_kind, j);
}

// ---------------------------------------------------------------------------
// Tiled GEMM. `b_kn`: the second operand is [k, n] (matmul) rather than a
// weight [n, k] of type `wt` (linear).

inline void gemm_body(const int wt, const int b_kn, global const float* x, global const uchar* w,
                      global const uchar* bias, uint b_off, int bias_kind, global float* y,
                      int rows, int k, int n, local float* xs, local float* ws) {
    int tx = get_local_id(0), ty = get_local_id(1);
    int t = ty * GEMM_T + tx;
    int n0 = get_group_id(0) * TILE, m0 = get_group_id(1) * TILE;
    ulong row_bytes = (ulong)(k / wt_vals(wt)) * wt_bytes(wt);
    float acc[16];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i] = 0.0f;
    for (int k0 = 0; k0 < k; k0 += TK) {
        // 64 x 32 tiles, 8 values per thread; consecutive threads read
        // consecutive k (x, weights) or consecutive n (matmul's b).
#pragma unroll
        for (int i = 0; i < TILE * TK / (GEMM_T * GEMM_T); i++) {
            int idx = t + i * GEMM_T * GEMM_T;
            int r = idx / TK, c = idx % TK;
            int gr = m0 + r, gc = k0 + c;
            xs[r * TKP + c] = (gr < rows && gc < k) ? x[(ulong)gr * k + gc] : 0.0f;
            if (b_kn) {
                int bn = idx % TILE, bk = idx / TILE;
                int gn = n0 + bn, gk = k0 + bk;
                ws[bn * TKP + bk] =
                    (gn < n && gk < k) ? ((global const float*)w)[(ulong)gk * n + gn] : 0.0f;
            } else {
                int gn = n0 + r;
                ws[r * TKP + c] = (gn < n && gc < k) ? w_at(wt, w + gn * row_bytes, gc) : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = xs[(ty + GEMM_T * i) * TKP + kk];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = ws[(tx + GEMM_T * j) * TKP + kk];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i * 4 + j] = mad(a[i], b[j], acc[i * 4 + j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int gr = m0 + ty + GEMM_T * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int gn = n0 + tx + GEMM_T * j;
            if (gr < rows && gn < n)
                y[(ulong)gr * n + gn] = acc[i * 4 + j] + bias_at(bias, b_off, bias_kind, gn);
        }
    }
}

// ---------------------------------------------------------------------------
// Embedding: one work-item per output value (d fastest: coalesced writes).
// The host has checked the ids; an id out of range still reads nothing and
// gives zeros rather than reading past the table.

inline void embed_body(const int wt, global const uchar* w, uint w_off, global const int* ids,
                       uint ids_off, global float* y, int d, int v, int nids) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= d || r >= nids) return;
    int id = ids[ids_off + r];
    ulong row_bytes = (ulong)(d / wt_vals(wt)) * wt_bytes(wt);
    global const uchar* row = w + (ulong)w_off * wt_bytes(wt) + (ulong)id * row_bytes;
    y[(ulong)r * d + c] = (id >= 0 && id < v) ? w_at(wt, row, c) : 0.0f;
}

// ---------------------------------------------------------------------------
// The kernels, per weight type.

#define LINEAR_STAMP(T, WT)                                                                   \
    kernel __attribute__((reqd_work_group_size(GEMV_WG, 1, 1))) void linear_gemv_##T(          \
        global const float* x, uint x_off, global const uchar* w, uint w_off,                  \
        global const uchar* bias, uint b_off, int bias_kind, global float* y, uint y_off,      \
        int rows, int k, int n) {                                                              \
        local float red[GEMV_R * GEMV_WG];                                                     \
        gemv_body(WT, x, x_off, w, w_off, bias, b_off, bias_kind, y, y_off, rows, k, n, red);  \
    }                                                                                          \
    kernel __attribute__((reqd_work_group_size(GEMM_T, GEMM_T, 1))) void linear_gemm_##T(      \
        global const float* x, uint x_off, global const uchar* w, uint w_off,                  \
        global const uchar* bias, uint b_off, int bias_kind, global float* y, uint y_off,      \
        int rows, int k, int n) {                                                              \
        local float xs[TILE * TKP];                                                            \
        local float ws[TILE * TKP];                                                            \
        gemm_body(WT, 0, x + x_off, w + (ulong)w_off * wt_bytes(WT), bias, b_off, bias_kind,   \
                  y + y_off, rows, k, n, xs, ws);                                              \
    }                                                                                          \
    kernel void linear_embed_##T(global const uchar* w, uint w_off, global const int* ids,     \
                                 uint ids_off, global float* y, int d, int v, int nids) {      \
        embed_body(WT, w, w_off, ids, ids_off, y, d, v, nids);                                 \
    }

LINEAR_STAMP(f32, WT_F32)
LINEAR_STAMP(f16, WT_F16)
LINEAR_STAMP(q4_0, WT_Q4_0)
LINEAR_STAMP(q4_1, WT_Q4_1)
LINEAR_STAMP(q8_0, WT_Q8_0)
LINEAR_STAMP(q6_k, WT_Q6_K)
LINEAR_STAMP(q4_k, WT_Q4_K)
LINEAR_STAMP(q5_k, WT_Q5_K)

// Batched a [batch, m, k] @ b [batch or 1, k, n] -> y [batch, m, n]; the
// batch is the third grid dimension, `b_stride` 0 for a shared b.
kernel __attribute__((reqd_work_group_size(GEMM_T, GEMM_T, 1))) void linear_matmul(
    global const float* a, uint a_off, global const float* b, uint b_off, uint b_stride,
    global float* y, int m, int k, int n) {
    local float xs[TILE * TKP];
    local float ws[TILE * TKP];
    ulong bi = get_group_id(2);
    gemm_body(WT_F32, 1, a + a_off + bi * m * k, (global const uchar*)(b + b_off + bi * (ulong)b_stride),
              (global const uchar*)a, 0, 0, y + bi * m * n, m, k, n, xs, ws);
}

// f16 (kind 1) or i32 (kind 2) values widened to f32 (matmul operands).
kernel void linear_widen(global const uchar* s, uint s_off, int kind, global float* d, int count) {
    int i = get_global_id(0);
    if (i >= count) return;
    d[i] = kind == 1 ? vload_half(s_off + i, (global const half*)s)
                     : (float)((global const int*)s)[s_off + i];
}

// RMSNorm of each row of x into `out` (merged_linear's normed input): one
// 64-thread work-group per row, sum of squares reduced in local memory.
// The gain is f32 (g_kind 1) or f16 (2).
kernel __attribute__((reqd_work_group_size(GEMV_WG, 1, 1))) void linear_rms_rows(
    global const float* x, uint x_off, global const uchar* g, uint g_off, int g_kind,
    global float* out, int k, float eps) {
    local float red[GEMV_WG];
    int r = get_group_id(0), lid = get_local_id(0);
    global const float* xr = x + x_off + (ulong)r * k;
    float ss = 0.0f;
    for (int i = lid; i < k; i += GEMV_WG) ss = mad(xr[i], xr[i], ss);
    red[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = GEMV_WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = 1.0f / sqrt(red[0] / (float)k + eps);
    for (int i = lid; i < k; i += GEMV_WG)
        out[(ulong)r * k + i] = xr[i] * inv * bias_at(g, g_off, g_kind, i);
}
