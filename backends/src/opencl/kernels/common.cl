// Helpers every program shares (prepended to each .cl file).
//
// Offsets are in elements of the tensor's dtype (for ggml blocks: values,
// always a multiple of the block size). Quantized rows are ggml blocks as
// stored in GGUF files: q4_0 (18 bytes: f16 d, 16 bytes of nibbles; value
// j < 16 is the low nibble of byte j, value j >= 16 the high nibble of byte
// j - 16), q4_1 (20 bytes: f16 d, f16 m), q8_0 (34 bytes: f16 d, 32 int8),
// q6_K (210 bytes per 256 values: ql[128], qh[64], int8 scales[16], f16 d),
// q4_K (144 bytes) and q5_K (176 bytes) per 256 values (see q4_k_at).

#if HAS_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

inline float ld_half(global const uchar* p) {
    return vload_half(0, (global const half*)p);
}

// Value `i` (0..32) of the q4_0 block at `b`.
inline float q4_0_at(global const uchar* b, int i) {
    float d = ld_half(b);
    uchar q = b[2 + (i & 15)];
    int n = i < 16 ? (q & 15) : (q >> 4);
    return d * (float)(n - 8);
}

inline float q4_1_at(global const uchar* b, int i) {
    float d = ld_half(b);
    float m = ld_half(b + 2);
    uchar q = b[4 + (i & 15)];
    int n = i < 16 ? (q & 15) : (q >> 4);
    return d * (float)n + m;
}

inline float q8_0_at(global const uchar* b, int i) {
    return ld_half(b) * (float)((global const char*)b)[2 + i];
}

// Value `i` (0..256) of the q6_K super-block at `b`.
inline float q6_k_at(global const uchar* b, int i) {
    global const uchar* ql = b;
    global const uchar* qh = b + 128;
    global const char* sc = (global const char*)(b + 192);
    float d = ld_half(b + 208);
    int half_ = i / 128;      // which 128-value half
    int j = i % 128;
    int quarter = j / 32;     // 0..3 within the half
    int l = j % 32;
    int lo;
    if (quarter == 0) lo = ql[half_ * 64 + l] & 15;
    else if (quarter == 1) lo = ql[half_ * 64 + l + 32] & 15;
    else if (quarter == 2) lo = ql[half_ * 64 + l] >> 4;
    else lo = ql[half_ * 64 + l + 32] >> 4;
    int hi = (qh[half_ * 32 + l] >> (2 * quarter)) & 3;
    int q = (lo | (hi << 4)) - 32;
    int s = sc[half_ * 8 + quarter * 2 + l / 16];
    return d * (float)s * (float)q;
}

// The 6-bit scale and min of 32-value unit `j` (0..8) of a q4_K / q5_K
// super-block, from its 12 packed bytes (ggml's get_scale_min_k4).
inline void k4_scale_min(global const uchar* q, int j, float* sc, float* mn) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *mn = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
        *mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Value `i` (0..256) of the q4_K super-block at `b`: f16 d, f16 dmin,
// scales[12], qs[128]; unit j = i / 32 reads the low (even j) or high (odd
// j) nibbles of qs[32 * (j / 2) ..]; value = d * sc * q - dmin * m.
inline float q4_k_at(global const uchar* b, int i) {
    int j = i >> 5, l = i & 31;
    float sc, mn;
    k4_scale_min(b + 4, j, &sc, &mn);
    uchar q = b[16 + (j >> 1) * 32 + l];
    int n = (j & 1) ? (q >> 4) : (q & 15);
    return ld_half(b) * sc * (float)n - ld_half(b + 2) * mn;
}

// Value `i` (0..256) of the q5_K super-block at `b`: as q4_K with qh[32]
// before qs[128]; bit j of qh[l] is the fifth bit of value 32 j + l.
inline float q5_k_at(global const uchar* b, int i) {
    int j = i >> 5, l = i & 31;
    float sc, mn;
    k4_scale_min(b + 4, j, &sc, &mn);
    uchar q = b[48 + (j >> 1) * 32 + l];
    int n = ((j & 1) ? (q >> 4) : (q & 15)) | (((b[16 + l] >> j) & 1) << 4);
    return ld_half(b) * sc * (float)n - ld_half(b + 2) * mn;
}

// Element `i` of a row-major tensor stored as `WT` (compile-time switch
// through the WT_* macros each program defines where it needs them).
#define WT_F32 0
#define WT_F16 1
#define WT_Q4_0 2
#define WT_Q4_1 3
#define WT_Q8_0 4
#define WT_Q6_K 5
#define WT_Q4_K 6
#define WT_Q5_K 7

inline float load_any(global const uchar* base, int wt, long i) {
    switch (wt) {
    case WT_F32: return ((global const float*)base)[i];
    case WT_F16: return vload_half(i, (global const half*)base);
    case WT_Q4_0: return q4_0_at(base + (i / 32) * 18, (int)(i % 32));
    case WT_Q4_1: return q4_1_at(base + (i / 32) * 20, (int)(i % 32));
    case WT_Q8_0: return q8_0_at(base + (i / 32) * 34, (int)(i % 32));
    case WT_Q4_K: return q4_k_at(base + (i / 256) * 144, (int)(i % 256));
    case WT_Q5_K: return q5_k_at(base + (i / 256) * 176, (int)(i % 256));
    default: return q6_k_at(base + (i / 256) * 210, (int)(i % 256));
    }
}
