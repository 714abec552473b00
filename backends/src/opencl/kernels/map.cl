// Kernels of the map family: elementwise unary maps, broadcasting binary
// ops, where, casts, fills (full) and arange.
//
// Design:
// - One kernel per op, the op a compile-time macro stamped into the kernel
//   body (`map_unary_exp`, `map_bin_add`, ...): no per-element switch on
//   the op, and each kernel stays small enough for a mobile GPU's register
//   file (Adreno/Mali cut the work-group size of register-hungry kernels).
// - Contiguous kernels handle 4 elements per work-item with vload4/vstore4
//   (vloadn needs only element alignment, so views at any offset work):
//   128-bit accesses are what Adreno and Mali coalesce best, and a float4
//   body maps onto Mali's vector ALUs. The last partial quad of a tensor
//   takes a scalar path in the same kernel.
// - Inputs may be f32, f16, i32 or bf16 (a bf16 device tensor only comes
//   from a cast); the dtype is a uniform kernel argument (DT_*), so the
//   branch on it never diverges. Arithmetic is f32 (f16 is only loaded and
//   stored), as on the CPU, which widens every input to f32 first.
// - Broadcasting (`*_nd` kernels): the host merges dimensions that every
//   input walks contiguously and drops size-1 ones, so equal shapes are
//   rank 1 and a row or column broadcast rank 2; what remains (at most 8
//   dims) arrives as per-dim sizes and per-input element strides (0 on a
//   broadcast dim), one work-item per output element.
// - The host launches 1-D ranges with work-groups of 128: a multiple of
//   every GPU's wave/warp width and within every device's limit; no local
//   memory is used (nothing is shared between work-items).
// - Integer ops are done in uint where Rust's wrapping arithmetic needs it
//   (signed overflow is undefined in OpenCL C), and division by zero sets a
//   flag the host reads back (the CPU raises an error there).

#define DT_F32 0
#define DT_F16 1
#define DT_I32 2
#define DT_BF16 3

inline float bf16_to_f32(ushort h) {
    return as_float(((uint)h) << 16);
}

// The `half` crate's bf16::from_f32: round to nearest even, NaN kept quiet.
inline ushort f32_to_bf16(float v) {
    uint x = as_uint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
    uint r = x >> 16;
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) r += 1u;
    return (ushort)r;
}

// Element `i` of a tensor of dtype `dt`, widened to f32 (i32 rounds to
// nearest, as Rust's `as f32`).
inline float ld_f(global const uchar* p, int dt, int i) {
    switch (dt) {
    case DT_F32: return ((global const float*)p)[i];
    case DT_F16: return vload_half(i, (global const half*)p);
    case DT_I32: return (float)((global const int*)p)[i];
    default: return bf16_to_f32(((global const ushort*)p)[i]);
    }
}

// Elements `i .. i + 4` (all in range) widened to f32.
inline float4 ld_f4(global const uchar* p, int dt, int i) {
    switch (dt) {
    case DT_F32: return vload4(0, (global const float*)p + i);
    case DT_F16: return vload_half4(0, (global const half*)(p + 2 * i));
    case DT_I32: return convert_float4(vload4(0, (global const int*)p + i));
    default: return as_float4(convert_uint4(vload4(0, (global const ushort*)p + i)) << 16);
    }
}

// Stores f32 `v` as dtype `dt`: f16 rounds to nearest even (the `half`
// crate's from_f32), i32 truncates and saturates with NaN -> 0 (Rust's
// `as i32`).
inline void st_f(global uchar* p, int dt, int i, float v) {
    switch (dt) {
    case DT_F32: ((global float*)p)[i] = v; break;
    case DT_F16: vstore_half_rte(v, i, (global half*)p); break;
    case DT_I32: ((global int*)p)[i] = isnan(v) ? 0 : convert_int_sat_rtz(v); break;
    default: ((global ushort*)p)[i] = f32_to_bf16(v); break;
    }
}

// ---- unary maps (the CPU's `unary_scalar` formulas) ----------------------
// Written as macros over a plain variable so one body serves float and
// float4 (OpenCL C has no user overloading).

#define U_NEG(x) (-(x))
#define U_EXP(x) exp(x)
#define U_LOG(x) log(x)
#define U_SQRT(x) sqrt(x)
#define U_RSQRT(x) (1.0f / sqrt(x))
#define U_RECIP(x) (1.0f / (x))
#define U_ABS(x) fabs(x)
#define U_SIN(x) sin(x)
#define U_COS(x) cos(x)
#define U_TANH(x) tanh(x)
#define U_SIGMOID(x) (1.0f / (1.0f + exp(-(x))))
// fmax ignores a NaN operand like f32::max: relu(NaN) = 0 on both.
#define U_RELU(x) fmax((x), 0.0f)
#define U_SILU(x) ((x) / (1.0f + exp(-(x))))
#define U_GELU(x) (0.5f * (x) * erfc(-(x) * M_SQRT1_2_F))
// sqrt(2 / pi) in f32, as the CPU computes it.
#define U_GELU_TANH(x) \
    (0.5f * (x) * (1.0f + tanh(0.7978845608f * ((x) + 0.044715f * (x) * (x) * (x)))))
// torch's threshold: x itself above 20 (select reads a vector compare's
// sign bit and a scalar compare's truth, so both forms pick alike).
#define U_SOFTPLUS(x) select(log1p(exp(x)), (x), (x) > 20.0f)

// y = op(x), x of any dtype, y f32 (fresh, offset 0).
#define UNARY(name, OP)                                                        \
kernel void map_unary_##name(global const uchar* x, int xoff, int xdt,         \
                             global float* y, int n) {                         \
    int i = (int)get_global_id(0) * 4;                                         \
    if (i >= n) return;                                                        \
    if (i + 4 <= n) {                                                          \
        float4 v = ld_f4(x, xdt, xoff + i);                                    \
        vstore4(OP(v), 0, y + i);                                              \
    } else {                                                                   \
        for (int k = i; k < n; k++) {                                          \
            float v = ld_f(x, xdt, xoff + k);                                  \
            y[k] = OP(v);                                                      \
        }                                                                      \
    }                                                                          \
}

// y = act(gate) * up, both f32 of one shape (the CPU applies the map, then
// multiplies: the same two roundings here).
#define GATED(name, OP)                                                        \
kernel void map_gated_##name(global const float* g, int goff,                  \
                             global const float* u, int uoff,                  \
                             global float* y, int n) {                         \
    int i = (int)get_global_id(0) * 4;                                         \
    if (i >= n) return;                                                        \
    if (i + 4 <= n) {                                                          \
        float4 v = vload4(0, g + goff + i);                                    \
        float4 a = OP(v);                                                      \
        vstore4(a * vload4(0, u + uoff + i), 0, y + i);                        \
    } else {                                                                   \
        for (int k = i; k < n; k++) {                                          \
            float v = g[goff + k];                                             \
            float a = OP(v);                                                   \
            y[k] = a * u[uoff + k];                                            \
        }                                                                      \
    }                                                                          \
}

#define UNARY_ALL(M)            \
    M(neg, U_NEG)               \
    M(exp, U_EXP)               \
    M(log, U_LOG)               \
    M(sqrt, U_SQRT)             \
    M(rsqrt, U_RSQRT)           \
    M(recip, U_RECIP)           \
    M(abs, U_ABS)               \
    M(sin, U_SIN)               \
    M(cos, U_COS)               \
    M(tanh, U_TANH)             \
    M(sigmoid, U_SIGMOID)       \
    M(relu, U_RELU)             \
    M(silu, U_SILU)             \
    M(gelu, U_GELU)             \
    M(gelu_tanh, U_GELU_TANH)   \
    M(softplus, U_SOFTPLUS)

UNARY_ALL(UNARY)
UNARY_ALL(GATED)

// ---- binary ops -----------------------------------------------------------
// f32 forms take the value type T (float or float4): comparisons give
// 1.0/0.0 through select (a vector compare yields -1 per true lane, which
// select reads by its sign bit; a scalar one yields 1).

#define B_ADD(T, a, b) ((a) + (b))
#define B_SUB(T, a, b) ((a) - (b))
#define B_MUL(T, a, b) ((a) * (b))
#define B_DIV(T, a, b) ((a) / (b))
#define B_POW(T, a, b) pow((a), (b))
#define B_MAX(T, a, b) fmax((a), (b))
#define B_MIN(T, a, b) fmin((a), (b))
#define B_EQ(T, a, b) select((T)(0.0f), (T)(1.0f), (a) == (b))
#define B_NE(T, a, b) select((T)(0.0f), (T)(1.0f), (a) != (b))
#define B_LT(T, a, b) select((T)(0.0f), (T)(1.0f), (a) < (b))
#define B_LE(T, a, b) select((T)(0.0f), (T)(1.0f), (a) <= (b))
#define B_GT(T, a, b) select((T)(0.0f), (T)(1.0f), (a) > (b))
#define B_GE(T, a, b) select((T)(0.0f), (T)(1.0f), (a) >= (b))

// i32 forms: Rust's wrapping add/sub/mul/pow, Python's floor division
// (`err` flags a division by zero; the result there is 0).
inline int i_div(int a, int b, global int* err) {
    if (b == 0) {
        *err = 1;
        return 0;
    }
    if (a == INT_MIN && b == -1) return INT_MIN;  // wrapping_div
    int q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int i_pow(int a, int b) {
    uint base = (uint)a, r = 1u;
    uint e = b < 0 ? 0u : (uint)b;
    while (e != 0u) {
        if (e & 1u) r *= base;
        base *= base;
        e >>= 1;
    }
    return (int)r;
}

#define I_ADD(a, b, err) ((int)((uint)(a) + (uint)(b)))
#define I_SUB(a, b, err) ((int)((uint)(a) - (uint)(b)))
#define I_MUL(a, b, err) ((int)((uint)(a) * (uint)(b)))
#define I_DIV(a, b, err) i_div((a), (b), (err))
#define I_POW(a, b, err) i_pow((a), (b))
#define I_MAX(a, b, err) max((a), (b))
#define I_MIN(a, b, err) min((a), (b))
#define I_EQ(a, b, err) ((int)((a) == (b)))
#define I_NE(a, b, err) ((int)((a) != (b)))
#define I_LT(a, b, err) ((int)((a) < (b)))
#define I_LE(a, b, err) ((int)((a) <= (b)))
#define I_GT(a, b, err) ((int)((a) > (b)))
#define I_GE(a, b, err) ((int)((a) >= (b)))

// Broadcast walk: the output's flat index `i` split over `rank` dims
// (sizes d0..d7, padded with leading dims the walk skips), accumulating
// each input's element offset from its strides.
#define ND_DIMS int rank, int d0, int d1, int d2, int d3, int d4, int d5, int d6, int d7
#define ND_STRIDES(p) \
    int p##0, int p##1, int p##2, int p##3, int p##4, int p##5, int p##6, int p##7

// Contiguous (or scalar) sides: `xs`/`ys` are 1 for a side of n elements,
// 0 for a one-element side. Any input dtypes; f32 out.
#define BINARY(name, OP)                                                       \
kernel void map_bin_##name(global const uchar* x, int xoff, int xdt, int xs,   \
                           global const uchar* y, int yoff, int ydt, int ys,   \
                           global float* z, int n) {                           \
    int i = (int)get_global_id(0) * 4;                                         \
    if (i >= n) return;                                                        \
    if (i + 4 <= n) {                                                          \
        float4 a = xs ? ld_f4(x, xdt, xoff + i) : (float4)(ld_f(x, xdt, xoff)); \
        float4 b = ys ? ld_f4(y, ydt, yoff + i) : (float4)(ld_f(y, ydt, yoff)); \
        vstore4(OP(float4, a, b), 0, z + i);                                   \
    } else {                                                                   \
        for (int k = i; k < n; k++) {                                          \
            float a = ld_f(x, xdt, xoff + k * xs);                             \
            float b = ld_f(y, ydt, yoff + k * ys);                             \
            z[k] = OP(float, a, b);                                            \
        }                                                                      \
    }                                                                          \
}                                                                              \
                                                                               \
kernel void map_bin_##name##_nd(global const uchar* x, int xoff, int xdt,      \
                                global const uchar* y, int yoff, int ydt,      \
                                global float* z, int n, ND_DIMS,               \
                                ND_STRIDES(sx), ND_STRIDES(sy)) {              \
    int o = (int)get_global_id(0);                                             \
    if (o >= n) return;                                                        \
    int dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};                            \
    int stx[8] = {sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7};                     \
    int sty[8] = {sy0, sy1, sy2, sy3, sy4, sy5, sy6, sy7};                     \
    int r = o, ix = xoff, iy = yoff;                                           \
    for (int d = 7; d >= 8 - rank; d--) {                                      \
        int c = r % dims[d];                                                   \
        r /= dims[d];                                                          \
        ix += c * stx[d];                                                      \
        iy += c * sty[d];                                                      \
    }                                                                          \
    float a = ld_f(x, xdt, ix);                                                \
    float b = ld_f(y, ydt, iy);                                                \
    z[o] = OP(float, a, b);                                                    \
}

// Two i32 inputs, i32 out, any broadcast (integer maps are small: index
// arithmetic), `err` set on an integer division by zero.
#define BINARY_I32(name, OP)                                                   \
kernel void map_bin_##name##_i32(global const int* x, int xoff,                \
                                 global const int* y, int yoff,                \
                                 global int* z, int n, global int* err,        \
                                 ND_DIMS, ND_STRIDES(sx), ND_STRIDES(sy)) {    \
    int o = (int)get_global_id(0);                                             \
    if (o >= n) return;                                                        \
    int dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};                            \
    int stx[8] = {sx0, sx1, sx2, sx3, sx4, sx5, sx6, sx7};                     \
    int sty[8] = {sy0, sy1, sy2, sy3, sy4, sy5, sy6, sy7};                     \
    int r = o, ix = xoff, iy = yoff;                                           \
    for (int d = 7; d >= 8 - rank; d--) {                                      \
        int c = r % dims[d];                                                   \
        r /= dims[d];                                                          \
        ix += c * stx[d];                                                      \
        iy += c * sty[d];                                                      \
    }                                                                          \
    int a = x[ix], b = y[iy];                                                  \
    z[o] = OP(a, b, err);                                                      \
}

#define BINARY_ALL(M)                   \
    M(add, B_ADD) M(sub, B_SUB)         \
    M(mul, B_MUL) M(div, B_DIV)         \
    M(pow, B_POW) M(max, B_MAX)         \
    M(min, B_MIN) M(eq, B_EQ)           \
    M(ne, B_NE) M(lt, B_LT)             \
    M(le, B_LE) M(gt, B_GT) M(ge, B_GE)

#define BINARY_I32_ALL(M)               \
    M(add, I_ADD) M(sub, I_SUB)         \
    M(mul, I_MUL) M(div, I_DIV)         \
    M(pow, I_POW) M(max, I_MAX)         \
    M(min, I_MIN) M(eq, I_EQ)           \
    M(ne, I_NE) M(lt, I_LT)             \
    M(le, I_LE) M(gt, I_GT) M(ge, I_GE)

BINARY_ALL(BINARY)
BINARY_I32_ALL(BINARY_I32)

// ---- where, cast, fills, arange -------------------------------------------

// z = c != 0 ? a : b, broadcast; any input dtypes, f32 out (the CPU widens
// all three, so a NaN condition picks `a`).
kernel void map_where(global const uchar* c, int coff, int cdt,
                      global const uchar* a, int aoff, int adt,
                      global const uchar* b, int boff, int bdt,
                      global float* z, int n, ND_DIMS,
                      ND_STRIDES(sc), ND_STRIDES(sa), ND_STRIDES(sb)) {
    int o = (int)get_global_id(0);
    if (o >= n) return;
    int dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
    int stc[8] = {sc0, sc1, sc2, sc3, sc4, sc5, sc6, sc7};
    int sta[8] = {sa0, sa1, sa2, sa3, sa4, sa5, sa6, sa7};
    int stb[8] = {sb0, sb1, sb2, sb3, sb4, sb5, sb6, sb7};
    int r = o, ic = coff, ia = aoff, ib = boff;
    for (int d = 7; d >= 8 - rank; d--) {
        int k = r % dims[d];
        r /= dims[d];
        ic += k * stc[d];
        ia += k * sta[d];
        ib += k * stb[d];
    }
    // Only the picked side is read.
    z[o] = ld_f(c, cdt, ic) != 0.0f ? ld_f(a, adt, ia) : ld_f(b, bdt, ib);
}

// y (dtype ydt, fresh) = x (dtype xdt) through f32, as the CPU's cast
// (which widens to f32, then narrows). Four elements per work-item.
kernel void map_cast(global const uchar* x, int xoff, int xdt,
                     global uchar* y, int ydt, int n) {
    int i = (int)get_global_id(0) * 4;
    if (i >= n) return;
    if (i + 4 <= n) {
        float4 v = ld_f4(x, xdt, xoff + i);
        st_f(y, ydt, i, v.s0);
        st_f(y, ydt, i + 1, v.s1);
        st_f(y, ydt, i + 2, v.s2);
        st_f(y, ydt, i + 3, v.s3);
    } else {
        for (int k = i; k < n; k++) st_f(y, ydt, k, ld_f(x, xdt, xoff + k));
    }
}

// Fills with a 32-bit pattern (f32 or i32 bits, computed on the host
// exactly as the CPU rounds the value), four per work-item.
kernel void map_fill32(global uint* y, uint v, int n) {
    int i = (int)get_global_id(0) * 4;
    if (i >= n) return;
    if (i + 4 <= n) {
        vstore4((uint4)(v), 0, y + i);
    } else {
        for (int k = i; k < n; k++) y[k] = v;
    }
}

// Fills with a 16-bit pattern (f16 or bf16 bits).
kernel void map_fill16(global ushort* y, uint v, int n) {
    int i = (int)get_global_id(0) * 4;
    if (i >= n) return;
    if (i + 4 <= n) {
        vstore4((ushort4)((ushort)v), 0, y + i);
    } else {
        for (int k = i; k < n; k++) y[k] = (ushort)v;
    }
}

// start + i * step for integral start and step whose values all stay
// within +-2^24 (the host checks): exact in int, and exactly representable
// in f32, so this equals the CPU's f64 arithmetic then narrowing.
kernel void map_arange(global uchar* y, int ydt, int start, int step, int n) {
    int i = (int)get_global_id(0);
    if (i >= n) return;
    int v = start + i * step;
    if (ydt == DT_I32) ((global int*)y)[i] = v;
    else st_f(y, ydt, i, (float)v);
}
