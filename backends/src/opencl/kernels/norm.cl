// Kernels of the norm family: RMSNorm, LayerNorm, the fused residual add +
// RMSNorm, and rotary embedding (rotate-half layout).
//
// Design:
// - Norms run one work-group per row (`get_group_id(0)` is the row). The
//   work-group size is a power of two up to NORM_WG (256), chosen by the
//   launcher from the row length and the device's limit. Each work-item
//   strides over the row by the group size, so consecutive work-items read
//   consecutive floats (coalesced on GPUs; on Adreno/Mali the loads of one
//   wave/warp land in one cache line). The partial sums meet in a tree
//   reduction in `local` memory (a fixed NORM_WG floats: static sizing
//   lets the compiler place it; 1 KiB fits every mobile GPU's local store).
// - The row is read twice (sum of squares, then the scaled write) rather
//   than cached in local memory: rows of 4-8K floats would not fit the
//   32 KiB local memory of mobile GPUs, and the second read hits L2.
// - LayerNorm takes two reductions (mean, then the centred variance), the
//   two-pass formula the CPU uses: E[x^2] - E[x]^2 loses precision.
// - Arithmetic is f32; the gain and bias may be f32 or f16 (`w_half` /
//   `b_half`, a uniform branch), loaded with vload_half (no cl_khr_fp16
//   needed). The formulas follow `cpu/norm.rs` term by term:
//   `x * (1 / sqrt(ss / d + eps)) * w`.
// - Rope: one work-item per rotated pair, a 2-D range (pair, row), so a
//   wave covers consecutive pairs of one head: coalesced reads of both
//   halves and of the cos/sin row.
// Offsets are in elements of each tensor's dtype.

#define NORM_WG 256

inline float norm_ld(global const uchar* p, int is_half, int i) {
    return is_half ? vload_half(i, (global const half*)p) : ((global const float*)p)[i];
}

// Sum of `v` over the work-group (`n` work-items, a power of two); every
// work-item gets the total. Ends with a barrier so `sc` may be reused.
inline float norm_group_sum(local float* sc, float v, int lid, int n) {
    sc[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n >> 1; s > 0; s >>= 1) {
        if (lid < s) sc[lid] += sc[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float t = sc[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return t;
}

// y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w
kernel void norm_rms(global const float* x, int xoff,
                     global const uchar* w, int woff, int w_half,
                     global float* y, int d, float eps) {
    local float sc[NORM_WG];
    int lid = get_local_id(0), n = get_local_size(0);
    long row = get_group_id(0);
    global const float* xr = x + xoff + row * d;
    global float* yr = y + row * d;
    float acc = 0.0f;
    for (int i = lid; i < d; i += n) {
        float v = xr[i];
        acc += v * v;
    }
    float ss = norm_group_sum(sc, acc, lid, n);
    float inv = 1.0f / sqrt(ss / (float)d + eps);
    for (int i = lid; i < d; i += n) {
        yr[i] = xr[i] * inv * norm_ld(w, w_half, woff + i);
    }
}

// out[0, r, :] = h = x + y; out[1, r, :] = rms_norm(h, w). `rows` is the
// number of rows of x (the second half starts at rows * d).
kernel void norm_add_rms(global const float* x, int xoff,
                         global const float* yin, int yoff,
                         global const uchar* w, int woff, int w_half,
                         global float* out, int d, int rows, float eps) {
    local float sc[NORM_WG];
    int lid = get_local_id(0), n = get_local_size(0);
    long row = get_group_id(0);
    global const float* xr = x + xoff + row * d;
    global const float* yr = yin + yoff + row * d;
    global float* hr = out + row * d;
    global float* nr = out + ((long)rows + row) * d;
    float acc = 0.0f;
    for (int i = lid; i < d; i += n) {
        float h = xr[i] + yr[i];
        hr[i] = h;
        acc += h * h;
    }
    float ss = norm_group_sum(sc, acc, lid, n);
    float inv = 1.0f / sqrt(ss / (float)d + eps);
    // Each work-item reads back only the sums it wrote itself (same
    // stride), so no global fence is needed.
    for (int i = lid; i < d; i += n) {
        nr[i] = hr[i] * inv * norm_ld(w, w_half, woff + i);
    }
}

// y = (x - mean) * rsqrt(var + eps) * w + b, biased variance.
kernel void norm_layer(global const float* x, int xoff,
                       global const uchar* w, int woff, int w_half,
                       global const uchar* b, int boff, int b_half,
                       global float* y, int d, float eps) {
    local float sc[NORM_WG];
    int lid = get_local_id(0), n = get_local_size(0);
    long row = get_group_id(0);
    global const float* xr = x + xoff + row * d;
    global float* yr = y + row * d;
    float acc = 0.0f;
    for (int i = lid; i < d; i += n) acc += xr[i];
    float mean = norm_group_sum(sc, acc, lid, n) / (float)d;
    acc = 0.0f;
    for (int i = lid; i < d; i += n) {
        float c = xr[i] - mean;
        acc += c * c;
    }
    float var = norm_group_sum(sc, acc, lid, n) / (float)d;
    float inv = 1.0f / sqrt(var + eps);
    for (int i = lid; i < d; i += n) {
        yr[i] = (xr[i] - mean) * inv * norm_ld(w, w_half, woff + i)
              + norm_ld(b, b_half, boff + i);
    }
}

// x [s, h, d], cos/sin [s, d/2]: for i < d/2 the pair (x[i], x[i + d/2])
// rotates by angle i of its position. Range: (d/2, s*h).
kernel void norm_rope(global const float* x, int xoff,
                      global const float* c, int coff,
                      global const float* sn, int soff,
                      global float* y, int heads, int d, int rows) {
    int i = get_global_id(0);
    int r = get_global_id(1);
    int half_ = d / 2;
    if (i >= half_ || r >= rows) return;
    int t = r / heads;
    long base = (long)r * d;
    float cv = c[coff + t * half_ + i];
    float sv = sn[soff + t * half_ + i];
    float a = x[xoff + base + i];
    float bv = x[xoff + base + half_ + i];
    y[base + i] = a * cv - bv * sv;
    y[base + half_ + i] = bv * cv + a * sv;
}
