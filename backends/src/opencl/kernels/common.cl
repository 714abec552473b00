// Helpers every program shares (prepended to each .cl file).
//
// Offsets are in elements of the tensor's dtype (for ggml blocks: values,
// always a multiple of the block size). Quantized rows are ggml blocks as
// stored in GGUF files: q4_0 (18 bytes: f16 d, 16 bytes of nibbles; value
// j < 16 is the low nibble of byte j, value j >= 16 the high nibble of byte
// j - 16), q4_1 (20 bytes: f16 d, f16 m), q8_0 (34 bytes: f16 d, 32 int8),
// q6_K (210 bytes per 256 values: ql[128], qh[64], int8 scales[16], f16 d).

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

// Element `i` of a row-major tensor stored as `WT` (compile-time switch
// through the WT_* macros each program defines where it needs them).
#define WT_F32 0
#define WT_F16 1
#define WT_Q4_0 2
#define WT_Q4_1 3
#define WT_Q8_0 4
#define WT_Q6_K 5

inline float load_any(global const uchar* base, int wt, long i) {
    switch (wt) {
    case WT_F32: return ((global const float*)base)[i];
    case WT_F16: return vload_half(i, (global const half*)base);
    case WT_Q4_0: return q4_0_at(base + (i / 32) * 18, (int)(i % 32));
    case WT_Q4_1: return q4_1_at(base + (i / 32) * 20, (int)(i % 32));
    case WT_Q8_0: return q8_0_at(base + (i / 32) * 34, (int)(i % 32));
    default: return q6_k_at(base + (i / 256) * 210, (int)(i % 256));
    }
}
