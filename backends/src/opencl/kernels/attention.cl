// Kernels of the attention family: scaled dot-product attention (plain and
// over a KV cache) and the device KV cache's row stores.
//
// Rows. Queries are f32 [sq, hq, d]; keys [sk, hk, d] and values
// [sk, hk, dv] are f32, f16 or q8_0 (a KV cache), selected at run time
// (`kv_at`; the switch is uniform over a work-group, so it costs a branch,
// not divergence) and widened to f32 as they are staged. A key head serves
// `group = hq / hk` query heads: a work-group takes "rows" r = (query i,
// head g of the group), r = i * group + g, so each key and value is loaded
// once for the whole group (grouped-query attention).
//
// Keys come from two sources: the past rows `p` (a cache of capacity `cap`
// of which the first `plen[0]` rows count, read on the device so a cached
// decode step never waits for the host) and then the new rows `n`. Plain
// sdpa passes its keys as `n` with no past rows (use_plen = 0).
//
// Masking is the CPU's (`cpu::attention::visible`): query i of sq sees keys
// 0 ..= sk - sq + i when causal, all sk otherwise; a query that sees no key
// (sk = 0) gives zeros.
//
// Two kernels:
// - `attention_flash` (prefill, many rows): one work-group per (block of
//   BQ rows, key head); key and value tiles of BK rows are staged in local
//   memory, the scores of a tile go through an online softmax (running max
//   m, sum l, accumulator O in local memory, rescaled by e^(m_old - m_new)),
//   and a causal block stops at the last key its last row sees. Local
//   memory: BQ*d (queries) + BK*(d+1) (keys, padded a float per row so the
//   dot products of neighbouring work-items fall in different banks) +
//   BK*dv + BQ*BK + BQ*dv + 3*BQ floats; the launcher shrinks BK then BQ
//   to fit 32 KiB (what Adreno and Mali give a work-group): BQ 16 x BK 32
//   for d = dv = 64, BQ 16 x BK 8 for d = dv = 128.
// - `attention_decode` + `attention_combine` (decode, few rows): split-K.
//   The keys are cut into chunks, one work-group per (chunk, key head), so
//   a single query still fills the GPU. Each work-item scores whole keys
//   (reading one key row contiguously, vector-friendly, from the cache),
//   the group reduces max and sum in local memory, and multiplies the
//   probabilities by the value rows with work-items along dv (coalesced).
//   Partial (m, l, O) go to a scratch buffer; `attention_combine` rescales
//   and merges them per output value.
// Work-groups are 64 work-items (one wave on most GPUs); arithmetic is f32.

inline float kv_at(global const uchar* base, int t, long i) {
    if (t == WT_F16) return vload_half(i, (global const half*)base);
    if (t == WT_Q8_0) return q8_0_at(base + (i / 32) * 34, (int)(i % 32));
    return ((global const float*)base)[i];
}

// Value c of row (position j, head kh) of width w: past rows first.
inline float kv_row_at(global const uchar* p, int pt, int po, global const uchar* n, int nt,
                       int no, int np, int hk, int w, int j, int kh, int c) {
    if (j < np) return kv_at(p, pt, (long)po + ((long)j * hk + kh) * w + c);
    return kv_at(n, nt, (long)no + ((long)(j - np) * hk + kh) * w + c);
}

// Keys query i of sq may see among sk.
inline int visible(int causal, int sk, int sq, int i) {
    if (!causal) return sk;
    return clamp(sk - sq + i + 1, 0, sk);
}

// Past rows in use: the device-held length, clamped to the capacity.
inline int past_rows(global const int* plen, int use_plen, int cap) {
    return use_plen ? clamp(plen[0], 0, cap) : 0;
}

kernel void attention_flash(
    global const float* q, int qo,
    global const uchar* kp, int kpt, int kpo, global const uchar* kn, int knt, int kno,
    global const uchar* vp, int vpt, int vpo, global const uchar* vn, int vnt, int vno,
    global const int* plen, int use_plen, int cap, int sn,
    int sq, int hq, int hk, int d, int dv, int causal, float scale, int bq, int bk,
    global float* out,
    local float* qs, local float* ks, local float* vs, local float* ss, local float* os,
    local float* st) {
    int lid = get_local_id(0), wg = get_local_size(0);
    int r0 = get_group_id(0) * bq, kh = get_group_id(1);
    int group = hq / hk;
    int rows = sq * group;
    int np = past_rows(plen, use_plen, cap);
    int sk = np + sn;
    int kd = d + 1; // padded key row
    local float* m = st;
    local float* l = st + bq;
    local float* corr = st + 2 * bq;

    for (int e = lid; e < bq * d; e += wg) {
        int rr = e / d, c = e % d, r = r0 + rr;
        float x = 0.0f;
        if (r < rows) x = q[qo + ((r / group) * hq + kh * group + r % group) * d + c];
        qs[e] = x;
    }
    for (int e = lid; e < bq * dv; e += wg) os[e] = 0.0f;
    for (int rr = lid; rr < bq; rr += wg) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
    }
    int rlast = min(r0 + bq, rows) - 1;
    int kend = visible(causal, sk, sq, rlast / group);
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int k0 = 0; k0 < kend; k0 += bk) {
        int nk = min(bk, kend - k0);
        for (int e = lid; e < bk * d; e += wg) {
            int jj = e / d, c = e % d;
            ks[jj * kd + c] = jj < nk ? kv_row_at(kp, kpt, kpo, kn, knt, kno, np, hk, d, k0 + jj, kh, c) : 0.0f;
        }
        for (int e = lid; e < bk * dv; e += wg) {
            int jj = e / dv, c = e % dv;
            vs[e] = jj < nk ? kv_row_at(vp, vpt, vpo, vn, vnt, vno, np, hk, dv, k0 + jj, kh, c) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < bq * bk; e += wg) {
            int rr = e / bk, jj = e % bk, r = r0 + rr;
            float s = -INFINITY;
            if (r < rows && jj < nk && k0 + jj < visible(causal, sk, sq, r / group)) {
                float acc = 0.0f;
                local const float* qr = qs + rr * d;
                local const float* kr = ks + jj * kd;
                for (int c = 0; c < d; c++) acc = fma(qr[c], kr[c], acc);
                s = acc * scale;
            }
            ss[e] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int rr = lid; rr < bq; rr += wg) {
            float mo = m[rr], mx = mo;
            for (int jj = 0; jj < nk; jj++) mx = fmax(mx, ss[rr * bk + jj]);
            float sum = 0.0f;
            for (int jj = 0; jj < bk; jj++) {
                float p = mx == -INFINITY ? 0.0f : exp(ss[rr * bk + jj] - mx);
                ss[rr * bk + jj] = p;
                sum += p;
            }
            // Nothing seen before (mo = -inf): the old accumulator is zero.
            float cr = mx == -INFINITY ? 1.0f : exp(mo - mx);
            corr[rr] = cr;
            l[rr] = l[rr] * cr + sum;
            m[rr] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < bq * dv; e += wg) {
            int rr = e / dv, c = e % dv;
            float acc = os[e] * corr[rr];
            for (int jj = 0; jj < nk; jj++) acc = fma(ss[rr * bk + jj], vs[jj * dv + c], acc);
            os[e] = acc;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < bq * dv; e += wg) {
        int rr = e / dv, c = e % dv, r = r0 + rr;
        if (r < rows) {
            float sum = l[rr];
            out[((r / group) * hq + kh * group + r % group) * dv + c] = sum > 0.0f ? os[e] / sum : 0.0f;
        }
    }
}

// Max (op 0) or sum (op 1) of red[0 .. wg) into red[0]; wg a power of two.
inline float attn_tree(local float* red, int lid, int wg, float v, int op) {
    red[lid] = v;
    for (int s = wg / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) red[lid] = op == 0 ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); // read by all before the next use
    return r;
}

// Rows the decode kernel takes at most (the launcher's DECODE_ROWS).
#define DECODE_ROWS 8

// One chunk of `chunk` keys for all `sq * group` rows of key head kh.
// part: [nsplit, hk, rows, 2 + dv] = (m, l, unnormalized O).
kernel void attention_decode(
    global const float* q, int qo,
    global const uchar* kp, int kpt, int kpo, global const uchar* kn, int knt, int kno,
    global const uchar* vp, int vpt, int vpo, global const uchar* vn, int vnt, int vno,
    global const int* plen, int use_plen, int cap, int sn,
    int sq, int hq, int hk, int d, int dv, int causal, float scale, int chunk,
    global float* part,
    local float* qs, local float* ss, local float* red) {
    int lid = get_local_id(0), wg = get_local_size(0);
    int split = get_group_id(0), kh = get_group_id(1);
    int group = hq / hk;
    int rows = sq * group;
    int np = past_rows(plen, use_plen, cap);
    int sk = np + sn;
    int kbeg = split * chunk;
    int kend = min(kbeg + chunk, visible(causal, sk, sq, sq - 1));

    for (int e = lid; e < rows * d; e += wg) {
        int r = e / d, c = e % d;
        qs[e] = q[qo + ((r / group) * hq + kh * group + r % group) * d + c];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Scores: a work-item per key, all rows at once (the key row is read
    // once per group of query heads).
    for (int jj = lid; jj < chunk; jj += wg) {
        int j = kbeg + jj;
        float acc[DECODE_ROWS];
        for (int r = 0; r < DECODE_ROWS; r++) acc[r] = 0.0f;
        if (j < kend) {
            // Each key value is loaded (and widened) once for all rows.
            for (int c = 0; c < d; c++) {
                float kv = kv_row_at(kp, kpt, kpo, kn, knt, kno, np, hk, d, j, kh, c);
                for (int r = 0; r < rows; r++) acc[r] = fma(qs[r * d + c], kv, acc[r]);
            }
        }
        for (int r = 0; r < rows; r++) {
            bool seen = j < kend && j < visible(causal, sk, sq, r / group);
            ss[r * chunk + jj] = seen ? acc[r] * scale : -INFINITY;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int nk = max(0, kend - kbeg);
    global float* pr = part + ((long)split * hk + kh) * rows * (2 + dv);
    for (int r = 0; r < rows; r++) {
        float mx = -INFINITY;
        for (int jj = lid; jj < nk; jj += wg) mx = fmax(mx, ss[r * chunk + jj]);
        mx = attn_tree(red, lid, wg, mx, 0);
        float sum = 0.0f;
        for (int jj = lid; jj < nk; jj += wg) {
            float p = mx == -INFINITY ? 0.0f : exp(ss[r * chunk + jj] - mx);
            ss[r * chunk + jj] = p;
            sum += p;
        }
        sum = attn_tree(red, lid, wg, sum, 1);
        if (lid == 0) {
            pr[r * (2 + dv)] = mx;
            pr[r * (2 + dv) + 1] = sum;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < rows * dv; e += wg) {
        int r = e / dv, c = e % dv;
        float acc = 0.0f;
        for (int jj = 0; jj < nk; jj++) {
            float p = ss[r * chunk + jj];
            if (p != 0.0f) acc = fma(p, kv_row_at(vp, vpt, vpo, vn, vnt, vno, np, hk, dv, kbeg + jj, kh, c), acc);
        }
        pr[r * (2 + dv) + 2 + c] = acc;
    }
}

// out[i, h, c] from the nsplit partials of its row: rescaled to the
// largest max and divided by the total sum. grid = (dv, rows, hk).
kernel void attention_combine(global const float* part, int nsplit, int sq, int hq, int hk,
                              int dv, global float* out) {
    int c = get_global_id(0), r = get_global_id(1), kh = get_global_id(2);
    int group = hq / hk;
    int rows = sq * group;
    if (c >= dv || r >= rows || kh >= hk) return;
    long stride = (long)hk * rows * (2 + dv);
    global const float* pr = part + ((long)kh * rows + r) * (2 + dv);
    float mx = -INFINITY;
    for (int s = 0; s < nsplit; s++) mx = fmax(mx, pr[s * stride]);
    float sum = 0.0f, acc = 0.0f;
    if (mx != -INFINITY) {
        for (int s = 0; s < nsplit; s++) {
            float ms = pr[s * stride];
            if (ms == -INFINITY) continue;
            float w = exp(ms - mx);
            sum += pr[s * stride + 1] * w;
            acc += pr[s * stride + 2 + c] * w;
        }
    }
    out[((r / group) * hq + kh * group + r % group) * dv + c] = sum > 0.0f ? acc / sum : 0.0f;
}

// ---- KV cache stores -------------------------------------------------

// dst rows (f32 or f16, `dt`) from `n` values of x (f32 or f16, `xt`),
// starting at element `at` of dst. A work-item per value.
kernel void attention_kv_store(global const uchar* x, int xt, int xo, int n,
                               global uchar* dst, int dt, int at) {
    int i = get_global_id(0);
    if (i >= n) return;
    float v = xt == WT_F16 ? vload_half(xo + i, (global const half*)x) : ((global const float*)x)[xo + i];
    if (dt == WT_F16) vstore_half_rte(v, (size_t)at + i, (global half*)dst);
    else ((global float*)dst)[(long)at + i] = v;
}

// a / b correctly rounded even where `/` is not (OpenCL allows 2.5 ulp):
// a refined reciprocal, then one Markstein correction with fma.
inline float div_rn(float a, float b) {
    float y = 1.0f / b;
    y = fma(fma(-b, y, 1.0f), y, y);
    float q0 = a * y;
    return fma(fma(-q0, b, a), y, q0);
}

// q8_0 blocks of `nblk` blocks of x (f32 or f16), written from element
// `at` of dst (a multiple of 32), exactly as the CPU's
// `BlockQ8_0::quantize`: d = amax / 127, codes round(v / d) half away from
// zero, d stored as f16 (round to nearest even). 32 work-items per block
// (a work-item per value: coalesced loads), amax through local memory.
kernel void attention_kv_store_q8_0(global const uchar* x, int xt, int xo, int nblk,
                                    global uchar* dst, int at, local float* red) {
    int lane = get_local_id(0), blk = get_global_id(1);
    int base = get_local_id(1) * 32;
    bool live = blk < nblk;
    float v = 0.0f;
    if (live) {
        long i = (long)xo + (long)blk * 32 + lane;
        v = xt == WT_F16 ? vload_half(i, (global const half*)x) : ((global const float*)x)[i];
    }
    red[base + lane] = fabs(v);
    for (int s = 16; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane < s) red[base + lane] = fmax(red[base + lane], red[base + lane + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float amax = red[base];
    if (!live) return;
    float dd = div_rn(amax, 127.0f);
    float id = dd != 0.0f ? div_rn(1.0f, dd) : 0.0f;
    global uchar* b = dst + ((long)at / 32 + blk) * 34;
    if (lane == 0) vstore_half_rte(dd, 0, (global half*)b);
    ((global char*)b)[2 + lane] = convert_char_sat(round(v * id));
}
