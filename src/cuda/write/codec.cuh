/* Device-side scalar codecs for the writer, bit-identical to the CPU reference
 * (src/format/scalar.c, src/format/record.c). All math is fp32 with IEEE rounding: the kernels
 * are built without fast-math and every rounding step that matters goes through an explicit
 * _rn intrinsic, so nothing is contracted or reassociated.
 *
 * E2M1 is always encoded in software (Hopper has no E2M1 conversion instruction). E4M3 has a
 * software encoder for every GPU; on sm_89+ the hardware conversion
 * (cvt.rn.satfinite.e4m3x2.f32: RNE, subnormals, saturating, NaN -> 0x7F) gives the same bytes
 * and is used unless MLAKV_SOFT_E4M3 is defined. tests/test_cuda_write.cu checks the hardware
 * conversion against the software one on all 2^32 fp32 inputs, and the software encoders
 * against the CPU codecs. */
#ifndef MLAKV_CUDA_WRITE_CODEC_CUH
#define MLAKV_CUDA_WRITE_CODEC_CUH

#include <cfloat>

#include <cuda_fp16.h>
#include <stdint.h>

#include "format/records.h"

namespace mlakv::cuda::write {

/* Recipe constants (records.h has the bit patterns). */
__device__ __forceinline__ float inv6() { return __uint_as_float(MLAKV_INV6_BITS); }
__device__ __forceinline__ float inv448() { return __uint_as_float(MLAKV_INV448_BITS); }
__device__ __forceinline__ float inv2688() { return __uint_as_float(MLAKV_INV2688_BITS); }

/* fp32 -> E4M3 (e4m3fn), software: round-to-nearest-even including subnormals, saturating at
 * +-448 (0x7E / 0xFE, Inf too), NaN -> 0x7F. Same integer recipe as mlakv_e4m3_encode. */
__device__ __forceinline__ uint32_t e4m3_encode_soft(float x) {
    const uint32_t bits = __float_as_uint(x);
    const uint32_t sign = (bits >> 24) & 0x80u;
    const uint32_t abits = bits & 0x7FFFFFFFu;
    if (abits > 0x7F800000u) return 0x7Fu;        /* NaN */
    if (abits > 0x43E00000u) return sign | 0x7Eu; /* > 448 or Inf: saturate */
    uint32_t mag;
    if (abits < 0x3C800000u) {
        /* below 2^-6: the subnormal grid of 2^-9. a * 512 is exact; __float2int_rn rounds to
         * nearest even; 8 is the encoding of 2^-6 (the smallest normal) */
        mag = (uint32_t)__float2int_rn(__fmul_rn(__uint_as_float(abits), 512.0f));
    } else {
        /* keep 3 mantissa bits, round to nearest even on the 20 dropped ones; a carry moves
         * into the exponent, which is the right result */
        const uint32_t r = abits + 0x7FFFFu + ((abits >> 20) & 1u);
        mag = (r >> 20) - (120u << 3); /* rebias 127 -> 7 */
    }
    return sign | mag;
}

/* Two values at once: low byte from lo, next byte from hi (16-bit result). */
__device__ __forceinline__ uint32_t e4m3x2_encode(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && !defined(MLAKV_SOFT_E4M3)
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return e4m3_encode_soft(lo) | (e4m3_encode_soft(hi) << 8);
#endif
}

__device__ __forceinline__ uint32_t e4m3_encode(float x) { return e4m3x2_encode(x, 0.0f) & 0xFFu; }

/* E4M3 byte -> fp32, exact; 0x7F / 0xFF -> NaN. */
__device__ __forceinline__ float e4m3_decode(uint32_t byte) {
    const uint32_t e = (byte >> 3) & 0xFu, m = byte & 7u;
    float v;
    if ((byte & 0x7Fu) == 0x7Fu)
        v = __uint_as_float(0x7FC00000u);
    else if (e == 0)
        v = __fmul_rn((float)m, 0.001953125f); /* m * 2^-9, exact */
    else
        v = __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (byte & 0x80u) ? -v : v;
}

/* e4m3_decode by the hardware conversion where there is one (E4M3 -> f16 is exact, f16 -> f32
 * too; 0x7F / 0xFF -> NaN); checked against e4m3_decode on all 256 bytes in the tests */
__device__ __forceinline__ float e4m3_decode_fast(uint32_t byte) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned int h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)(byte & 0xFFu)));
    return __half2float(__ushort_as_half((unsigned short)(h2 & 0xFFFFu)));
#else
    return e4m3_decode(byte);
#endif
}

/* 1 / d for a decoded E4M3 scale byte: the hardware approximation alone. For every positive
 * finite E4M3 value it equals the correctly rounded reciprocal (__frcp_rn, the CPU's 1.0f / d;
 * FORMATS.md, checked for all 256 bytes in tests/test_cuda_write.cu); for 0 it gives +Inf and
 * for NaN NaN, as __frcp_rn. */
__device__ __forceinline__ float rcp_e4m3(float d) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}

/* fp32 -> E2M1 nibble exactly as mlakv_e2m1_encode: RNE on the FORMATS.md boundaries,
 * saturating at +-6 (Inf too), NaN -> 0 (+0), a value that rounds to zero keeps its sign bit.
 *
 * With a = min(|q|, 6) the grid is 0.5 on [0, 2), 1 on [2, 4) and 2 on [4, 6]; adding a
 * power-of-two offset makes the fp32 adder round a to that grid, ties to even, and the low
 * bits of the sum are the magnitude code:
 *   [0, 2): 2a + 2^23        -> 2^23 + rint(2a)            codes 0..4
 *   [2, 4): a + (2^23 + 2)   -> 2^23 + 4 + rint(a - 2)     codes 4..6
 *   [4, 6]: a + (2^24 + 8)   -> 2^24 + 2 * (6 + rint((a - 4) / 2)), fp32 mantissa 6..7
 * (the shift by an even integer keeps the parity, so ties still go to the even code). */
__device__ __forceinline__ uint32_t e2m1_encode(float q) {
    const uint32_t qb = __float_as_uint(q);
    const float a = fminf(fabsf(q), 6.0f);
    const uint32_t c0 = __float_as_uint(__fmaf_rn(a, 2.0f, 8388608.0f));
    const uint32_t c1 = __float_as_uint(__fadd_rn(a, 8388610.0f));
    const uint32_t c2 = __float_as_uint(__fadd_rn(a, 16777224.0f));
    const uint32_t c = a < 2.0f ? c0 : (a < 4.0f ? c1 : c2);
    const uint32_t nib = (c & 0x7u) | ((qb >> 28) & 0x8u);
    return q == q ? nib : 0u;
}

/* e2m1_encode for a finite q (no NaN test): callers guarantee it. */
__device__ __forceinline__ uint32_t e2m1_encode_finite(float q) {
    const float a = fminf(fabsf(q), 6.0f);
    const uint32_t c0 = __float_as_uint(__fmaf_rn(a, 2.0f, 8388608.0f));
    const uint32_t c1 = __float_as_uint(__fadd_rn(a, 8388610.0f));
    const uint32_t c2 = __float_as_uint(__fadd_rn(a, 16777224.0f));
    const uint32_t c = a < 2.0f ? c0 : (a < 4.0f ? c1 : c2);
    /* (q >> 28) is sign:exponent-top-3; & ~7 keeps the sign at bit 3: one LOP3 with c & 7 */
    return (c & 0x7u) | ((__float_as_uint(q) >> 28) & ~0x7u);
}

/* E2M1 magnitude code of a in [0, 7) (callers guarantee the range; 6 <= a < 7 saturates to 7),
 * as the low byte of the returned fp32 bits MINUS 6 (mod 256): code = (r + 6) & 0xFF. Two
 * candidates let the fp32 adder round a, ties to even:
 *   c0 = 2a + (2^24 - 6)  -> bits 0x4B7FFFFA + rint(2a)   (grid 0.5 in a: right on [0, 2))
 *   cA = a + (2^24 - 4)   -> bits 0x4B7FFFFA + code       (right on [2, 7))
 * cA sits just below 2^24 for a < 4 (ulp 1: a on the grid 1, codes 4, 5) and above it for
 * a >= 4 (ulp 2: a on the grid 2, codes 6, 7), so one add covers both E2M1 binades; both
 * candidates count codes from the same bit pattern 0x4B7FFFFA (whose mantissa is even, so ties
 * go to the even code), and on each range the right one is the smaller (below 2, rint(a) + 2
 * >= rint(2a); from 2 on, rint(2a) or, past 2^24, 6 + rint(a - 3) >= the code). Three
 * instructions after |x| * inv instead of five for the three-candidate form. Checked against
 * mlakv_e2m1_encode on every fp32 in [0, 7) (tests/test_cuda_write.cu). */
__device__ __forceinline__ uint32_t e2m1_code_lt7(float a) {
    const float c0 = __fmaf_rn(a, 2.0f, 16777210.0f);
    const float ca = __fadd_rn(a, 16777212.0f);
    return __float_as_uint(fminf(c0, ca));
}

/* prmt.b32 in its generic form. Not __byte_perm (or the decoder's cuda::prmt over it): that
 * uses only bits 0-2 of each selector nibble, and the sign packing below needs bit 3 (replicate
 * the sign of the chosen byte). */
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

/* Eight E2M1 magnitude codes c[i] (e2m1_code_lt7: code - 6 in the low byte) and the signs of
 * the 16-bit inputs w -> eight nibbles, element i at bits 4i..4i+3. The sign of x * inv is the
 * sign of x: it comes straight from the input bits. */
__device__ __forceinline__ uint32_t e2m1x8_pack(const uint32_t (&c)[8], const uint4 &w) {
    /* byte k of t_k = code 2k | code 2k+1 << 4: the low bytes of c hold code - 6, so
     * c[2k] + (c[2k+1] << 4) is off by -6 - 0x60 = -0x66 in its low byte (the borrows only
     * reach the bytes that are dropped); + 0x66 restores it */
    const uint32_t t0 = c[0] + (c[1] << 4) + 0x66u, t1 = c[2] + (c[3] << 4) + 0x66u;
    const uint32_t t2 = c[4] + (c[5] << 4) + 0x66u, t3 = c[6] + (c[7] << 4) + 0x66u;
    const uint32_t codes = prmt(prmt(t0, t1, 0x0040u), prmt(t2, t3, 0x4000u), 0x7610u);
    /* signs: bit 15 of each 16-bit half. prmt with a selector nibble >= 8 replicates the sign
     * of the chosen byte: m = 0xFF where element i is negative */
    const uint32_t m0123 = prmt(w.x, w.y, 0xFDB9u), m4567 = prmt(w.z, w.w, 0xFDB9u);
    const uint32_t even = prmt(m0123, m4567, 0x6420u), odd = prmt(m0123, m4567, 0x7531u);
    return codes | (even & 0x08080808u) | (odd & 0x80808080u);
}

/* Eight input values (one 16-byte vector of bf16 or fp16: element i in 16-bit half i) times
 * inv -> eight E2M1 nibbles, exactly as mlakv_e2m1_encode(x * inv). Requires every
 * |x * inv| < 7 and inv > 0 (the fast path's conditions), so there is no NaN and no clamp. */
template <typename D>
__device__ __forceinline__ uint32_t e2m1x8_fast(const uint4 &w, float inv) {
    float f[8];
    D::unpack8(w, f);
    uint32_t c[8];
#pragma unroll
    for (int i = 0; i < 8; i++) c[i] = e2m1_code_lt7(__fmul_rn(fabsf(f[i]), inv));
    return e2m1x8_pack(c, w);
}

/* e2m1x8_fast for any finite inputs and a finite inv > 0: |x * inv| is clamped to 6 first,
 * which is mlakv_e2m1_encode's saturation (the accurate encoder's nibbles, whose scale byte may
 * sit below the standard one). */
template <typename D>
__device__ __forceinline__ uint32_t e2m1x8_sat(const uint4 &w, float inv) {
    float f[8];
    D::unpack8(w, f);
    uint32_t c[8];
#pragma unroll
    for (int i = 0; i < 8; i++) c[i] = e2m1_code_lt7(fminf(__fmul_rn(fabsf(f[i]), inv), 6.0f));
    return e2m1x8_pack(c, w);
}

/* The E2M1 value (magnitude) that mlakv_e2m1_encode rounds a in [0, 6] to: a is rounded on its
 * grid (0.5 below 2, 1 on [2, 4), 2 on [4, 6]) by adding and removing m = 2^22, 2^23 or 2^24,
 * taken from the exponent of max(a, 1); ties go to the even grid point, as the E2M1 RNE
 * boundaries want. Checked against mlakv_e2m1_encode on every fp32 in [0, 7.5]. */
__device__ __forceinline__ float e2m1_round_value(float a) {
    const float m = __uint_as_float((__float_as_uint(fmaxf(a, 1.0f)) & 0x7F800000u) + (22u << 23));
    return __fsub_rn(__fadd_rn(a, m), m);
}

/* One half (8 values, magnitudes ax) of the accurate encoder's group error for a scale byte of
 * value d, inv its reciprocal (two-level: times inv_t; 0 for byte 0), as the CPU
 * (src/format/record.c, nvfp4_group_error): e = |x| - e2m1 * d (two-level: (e2m1 * d) * s_t),
 * err = fma(e, e, err) in element order from 0. */
template <bool kTwoLevel>
__device__ __forceinline__ float accurate_half_error(const float ax[8], float d, float inv, float s_t) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float r = e2m1_round_value(fminf(__fmul_rn(ax[i], inv), 6.0f));
        const float e = kTwoLevel ? __fsub_rn(ax[i], __fmul_rn(__fmul_rn(r, d), s_t))
                                  : __fmaf_rn(-r, d, ax[i]); /* r * d is exact */
        acc = __fmaf_rn(e, e, acc);
    }
    return acc;
}

/* x / s from r = __frcp_rn(s) with one correction (Markstein): q0 = x r, d = s q0 - x (exact
 * in an fma), q = q0 - d r, correctly rounded (bit-identical to __fdiv_rn) when the residual d
 * does not underflow: s >= 2^-93 and |x / s| >= 2^-10 (below that E4M3 gives a signed zero
 * either way, and the sign is kept). Written with d = fma(s, q0, -x) rather than
 * fma(-s, q0, x) so that x = -0 keeps its sign (+0 + -0 = +0). tests/test_cuda_write.cu checks
 * it on every (x, s) the fp8_ds_mla recipes can produce from bf16 / fp16 inputs with
 * s >= 2^-93: quotient bit-identical where |x / s| >= 2^-10, E4M3 byte identical everywhere. */
__device__ __forceinline__ float div_markstein(float x, float s, float r) {
    const float q0 = __fmul_rn(x, r);
    return __fmaf_rn(__fmaf_rn(s, q0, -x), -r, q0);
}

/* fp8_ds_mla tile scale from the IEEE quotient amax / 448, both recipes as the CPU. */
__device__ __forceinline__ float fp8_scale_recipe(float s, int pow2) {
    if (pow2) {
        if (!(s >= 1e-4f)) s = 1e-4f;
        uint32_t b = __float_as_uint(s); /* finite (Inf -> FLT_MAX -> 2^128 = Inf) or Inf */
        if (b == 0x7F800000u) b = 0x7F7FFFFFu;
        if (b & 0x7FFFFFu) b = (b & 0xFF800000u) + 0x800000u; /* up to a power of two */
        s = __uint_as_float(b);
    } else {
        if (!(s >= FLT_MIN)) s = FLT_MIN;
    }
    return s;
}

/* amax / 448 correctly rounded for finite amax >= 0 (Markstein with the constant 1/448;
 * checked on every bf16 and fp16 amax against __fdiv_rn in tests/test_cuda_write.cu) */
__device__ __forceinline__ float div448(float amax) {
    return div_markstein(amax, 448.0f, inv448());
}

/* max(m, |x|) where NaN never raises the maximum (fmaxf returns the non-NaN operand), as
 * the CPU's `if (|x| > m) m = |x|` from m = 0. */
__device__ __forceinline__ float amax_acc(float m, float x) { return fmaxf(m, fabsf(x)); }

/* fp32 -> bf16 bits exactly as mlakv_f32_to_bf16: RNE; NaN quieted (bit 6 set), sign kept. */
__device__ __forceinline__ uint32_t f32_to_bf16_bits(float x) {
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 0x40u) & 0xFFFFu;
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

/* The bf16 RoPE field as the CPU writes it (src/format/record.c, encode_bf16_rope): a value
 * that is exactly a bf16 keeps its bits, NaN payloads included (a signalling NaN stays
 * signalling); others round as f32_to_bf16_bits. */
__device__ __forceinline__ uint32_t f32_to_bf16_rope_bits(float x) {
    const uint32_t u = __float_as_uint(x);
    return (u & 0xFFFFu) == 0u ? u >> 16 : f32_to_bf16_bits(x);
}

/* Two-level guard (FORMATS.md): a token whose s_t is below 2^-116 is stored as zero; returns
 * the s_t to store and use (0 for such a token). Below it 1/s_t, or (1/d) * (1/s_t) for a
 * group with a tiny scale, overflows. */
__device__ __forceinline__ float two_level_guard(float s_t) {
    return s_t < __uint_as_float(MLAKV_TWO_LEVEL_MIN_ST_BITS) ? 0.0f : s_t;
}

/* The 368-B RoPE scale after the guard (FORMATS.md): when the reciprocal of the recipe's scale
 * is not finite (scale 0 or below ~2^-128) the RoPE is stored as zero with scale 0. inv gets
 * the CPU's 1.0f / scale (only used when the returned scale is not 0). */
__device__ __forceinline__ float rope_scale_guard(float scale, float &inv) {
    inv = __frcp_rn(scale);
    return inv == INFINITY ? 0.0f : scale;
}

/* Input element types: 8 elements in a 16-byte vector. */
struct Bf16In {
    /* 8 bf16 -> 8 fp32 (exact) */
    __device__ __forceinline__ static void unpack8(const uint4 &v, float f[8]) {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
    }
    __device__ __forceinline__ static void unpack2(uint32_t w, float &lo, float &hi) {
        lo = __uint_as_float(w << 16);
        hi = __uint_as_float(w & 0xFFFF0000u);
    }
    /* max |x| of 8 values, NaN if any is NaN (max.NaN): packed bf16x2 maxima (exact), then
     * the two halves. The .xorsign.abs form takes |a| and |b|; the sign it produces is
     * dropped by the final |.|. */
    __device__ __forceinline__ static float amax8_nan(const uint4 &v) {
        uint32_t m;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 860
        asm("{\n\t.reg .b32 t0, t1;\n\t"
            "max.NaN.xorsign.abs.bf16x2 t0, %1, %2;\n\t"
            "max.NaN.xorsign.abs.bf16x2 t1, %3, %4;\n\t"
            "max.NaN.xorsign.abs.bf16x2 %0, t0, t1;\n\t}"
            : "=r"(m) : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
#else /* sm_80: no .xorsign.abs; clear the sign bits first */
        asm("{\n\t.reg .b32 t0, t1;\n\t"
            "max.NaN.bf16x2 t0, %1, %2;\n\t"
            "max.NaN.bf16x2 t1, %3, %4;\n\t"
            "max.NaN.bf16x2 %0, t0, t1;\n\t}"
            : "=r"(m) : "r"(v.x & 0x7FFF7FFFu), "r"(v.y & 0x7FFF7FFFu), "r"(v.z & 0x7FFF7FFFu), "r"(v.w & 0x7FFF7FFFu));
#endif
        float r;
        asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(fabsf(__uint_as_float(m << 16))), "f"(fabsf(__uint_as_float(m & 0xFFFF0000u))));
        return r;
    }
    /* the bf16 RoPE field: a raw copy of the bf16 input, signalling NaNs included, as on
     * the CPU */
    __device__ __forceinline__ static uint4 to_bf16x8(const uint4 &v) { return v; }
};

struct F16In {
    __device__ __forceinline__ static void unpack8(const uint4 &v, float f[8]) {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xFFFFu)));
            f[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
        }
    }
    __device__ __forceinline__ static void unpack2(uint32_t w, float &lo, float &hi) {
        lo = __half2float(__ushort_as_half((unsigned short)(w & 0xFFFFu)));
        hi = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
    }
    /* as Bf16In::amax8_nan, in f16x2 (max is exact; f16 -> f32 is exact for every non-NaN) */
    __device__ __forceinline__ static float amax8_nan(const uint4 &v) {
        uint32_t m;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 860
        asm("{\n\t.reg .b32 t0, t1;\n\t"
            "max.NaN.xorsign.abs.f16x2 t0, %1, %2;\n\t"
            "max.NaN.xorsign.abs.f16x2 t1, %3, %4;\n\t"
            "max.NaN.xorsign.abs.f16x2 %0, t0, t1;\n\t}"
            : "=r"(m) : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
#else /* sm_80: no .xorsign.abs; clear the sign bits first */
        asm("{\n\t.reg .b32 t0, t1;\n\t"
            "max.NaN.f16x2 t0, %1, %2;\n\t"
            "max.NaN.f16x2 t1, %3, %4;\n\t"
            "max.NaN.f16x2 %0, t0, t1;\n\t}"
            : "=r"(m) : "r"(v.x & 0x7FFF7FFFu), "r"(v.y & 0x7FFF7FFFu), "r"(v.z & 0x7FFF7FFFu), "r"(v.w & 0x7FFF7FFFu));
#endif
        float lo, hi, r;
        unpack2(m, lo, hi);
        asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(fabsf(lo)), "f"(fabsf(hi)));
        return r;
    }
    /* fp16 bits -> fp32 exactly as mlakv_f16_to_f32, NaN payload included (the hardware
     * conversion may canonicalize NaNs, and the bf16 RoPE field keeps the payload) */
    __device__ __forceinline__ static float to_f32_exact(uint32_t h) {
        const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
        if (exp == 0x1Fu) return __uint_as_float(sign | 0x7F800000u | (man << 13));
        return __half2float(__ushort_as_half((unsigned short)h)); /* finite: exact */
    }
    __device__ __forceinline__ static uint32_t bf16_2(uint32_t w) {
        return f32_to_bf16_rope_bits(to_f32_exact(w & 0xFFFFu)) |
               (f32_to_bf16_rope_bits(to_f32_exact(w >> 16)) << 16);
    }
    __device__ __forceinline__ static uint4 to_bf16x8(const uint4 &v) {
        return make_uint4(bf16_2(v.x), bf16_2(v.y), bf16_2(v.z), bf16_2(v.w));
    }
};

} // namespace mlakv::cuda::write

#endif
