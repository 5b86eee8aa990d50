/* Scalar codecs: E4M3, E2M1, bf16 and fp16 <-> fp32. These define the bytes: every SIMD and
 * CUDA encoder is tested bit for bit against them. All arithmetic is exact integer work on the
 * fp32 bit pattern, so the results do not depend on the FPU rounding mode. */
#include <math.h>
#include <string.h>

#include "format/scalar.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round the magnitude bits `abs` (fp32, finite, non-negative) to a float with `mbits` mantissa
 * bits, min normal exponent `emin` (unbiased) and subnormals below it; round-to-nearest-even.
 * Returns the result as (biased exponent << mbits | mantissa) in the target's encoding with
 * exponent bias `bias`; the caller saturates. */
static uint32_t round_to_minifloat(uint32_t abs, int mbits, int emin, int bias) {
    int e = (int)(abs >> 23) - 127;
    if (e < emin) {
        /* Subnormal in the target: value / 2^(emin - mbits) rounded to an integer, RNE. The
         * integer m in [0, 2^mbits] is already the encoding (m == 2^mbits is the min normal). */
        int shift = 23 + (emin - mbits) - e; /* bits of the fp32 significand below the unit */
        if (abs == 0) return 0;
        uint32_t sig = (abs & 0x7FFFFFu) | (e >= -126 ? 0x800000u : 0);
        if (e < -126) shift = 23 + (emin - mbits) + 126; /* fp32 subnormal input */
        if (shift > 31) return 0;                       /* far below half an ulp */
        uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return q;
    }
    int drop = 23 - mbits;
    uint32_t rounded = abs + ((1u << (drop - 1)) - 1) + ((abs >> drop) & 1);
    rounded >>= drop; /* (fp32 biased exponent << mbits) | mantissa, carry included */
    return rounded - ((uint32_t)(127 - bias) << mbits);
}

uint8_t mlakv_e4m3_encode(float x) {
    uint32_t u = f32_bits(x), sign = (u >> 24) & 0x80u, abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return 0x7F;            /* NaN */
    if (abs > f32_bits(448.0f)) return (uint8_t)(sign | 0x7E); /* saturate, Inf too */
    uint32_t code = round_to_minifloat(abs, 3, -6, 7);
    if (code > 0x7E) code = 0x7E; /* cannot happen for abs <= 448, kept for safety */
    return (uint8_t)(sign | code);
}

/* Every E4M3 byte's value (OCP e4m3fn: bias 7, subnormals on the 2^-9 grid, 0x7F/0xFF NaN).
 * Generated from the bit-level definition; tests/test_codecs_ref.py checks all 256 entries
 * against ml_dtypes through mlakv_e4m3_decode. */
const float mlakv_e4m3_table[256] = {
    0x0p+0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f,
    0x1p-6f, 0x1.2p-6f, 0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f,
    0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f, 0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f,
    0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f, 0x1.cp-4f, 0x1.ep-4f,
    0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
    0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f,
    0x1p-1f, 0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f,
    0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f, 0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f,
    0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f, 0x1.cp+1f, 0x1.ep+1f,
    0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f,
    0x1p+4f, 0x1.2p+4f, 0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f,
    0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f, 0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f,
    0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f, 0x1.cp+6f, 0x1.ep+6f,
    0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
    0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f, NAN,
    -0x0p+0f, -0x1p-9f, -0x1p-8f, -0x1.8p-8f, -0x1p-7f, -0x1.4p-7f, -0x1.8p-7f, -0x1.cp-7f,
    -0x1p-6f, -0x1.2p-6f, -0x1.4p-6f, -0x1.6p-6f, -0x1.8p-6f, -0x1.ap-6f, -0x1.cp-6f, -0x1.ep-6f,
    -0x1p-5f, -0x1.2p-5f, -0x1.4p-5f, -0x1.6p-5f, -0x1.8p-5f, -0x1.ap-5f, -0x1.cp-5f, -0x1.ep-5f,
    -0x1p-4f, -0x1.2p-4f, -0x1.4p-4f, -0x1.6p-4f, -0x1.8p-4f, -0x1.ap-4f, -0x1.cp-4f, -0x1.ep-4f,
    -0x1p-3f, -0x1.2p-3f, -0x1.4p-3f, -0x1.6p-3f, -0x1.8p-3f, -0x1.ap-3f, -0x1.cp-3f, -0x1.ep-3f,
    -0x1p-2f, -0x1.2p-2f, -0x1.4p-2f, -0x1.6p-2f, -0x1.8p-2f, -0x1.ap-2f, -0x1.cp-2f, -0x1.ep-2f,
    -0x1p-1f, -0x1.2p-1f, -0x1.4p-1f, -0x1.6p-1f, -0x1.8p-1f, -0x1.ap-1f, -0x1.cp-1f, -0x1.ep-1f,
    -0x1p+0f, -0x1.2p+0f, -0x1.4p+0f, -0x1.6p+0f, -0x1.8p+0f, -0x1.ap+0f, -0x1.cp+0f, -0x1.ep+0f,
    -0x1p+1f, -0x1.2p+1f, -0x1.4p+1f, -0x1.6p+1f, -0x1.8p+1f, -0x1.ap+1f, -0x1.cp+1f, -0x1.ep+1f,
    -0x1p+2f, -0x1.2p+2f, -0x1.4p+2f, -0x1.6p+2f, -0x1.8p+2f, -0x1.ap+2f, -0x1.cp+2f, -0x1.ep+2f,
    -0x1p+3f, -0x1.2p+3f, -0x1.4p+3f, -0x1.6p+3f, -0x1.8p+3f, -0x1.ap+3f, -0x1.cp+3f, -0x1.ep+3f,
    -0x1p+4f, -0x1.2p+4f, -0x1.4p+4f, -0x1.6p+4f, -0x1.8p+4f, -0x1.ap+4f, -0x1.cp+4f, -0x1.ep+4f,
    -0x1p+5f, -0x1.2p+5f, -0x1.4p+5f, -0x1.6p+5f, -0x1.8p+5f, -0x1.ap+5f, -0x1.cp+5f, -0x1.ep+5f,
    -0x1p+6f, -0x1.2p+6f, -0x1.4p+6f, -0x1.6p+6f, -0x1.8p+6f, -0x1.ap+6f, -0x1.cp+6f, -0x1.ep+6f,
    -0x1p+7f, -0x1.2p+7f, -0x1.4p+7f, -0x1.6p+7f, -0x1.8p+7f, -0x1.ap+7f, -0x1.cp+7f, -0x1.ep+7f,
    -0x1p+8f, -0x1.2p+8f, -0x1.4p+8f, -0x1.6p+8f, -0x1.8p+8f, -0x1.ap+8f, -0x1.cp+8f, NAN,
};

float mlakv_e4m3_decode(uint8_t byte) { return mlakv_e4m3_table[byte]; }

uint8_t mlakv_e2m1_encode(float x) {
    uint32_t u = f32_bits(x), sign = (u >> 28) & 0x8u, abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return 0; /* NaN -> +0 */
    float a = bits_f32(abs);
    uint8_t code;
    /* RNE boundaries of FORMATS.md: ties at 0.25, 1.25, 2.5, 5 go to the even code (down),
     * ties at 0.75, 1.75, 3.5 go up. */
    if (a <= 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return (uint8_t)(sign | code);
}

float mlakv_e2m1_decode(uint8_t nibble) { return mlakv_e2m1_values[nibble & 0xF]; }

float mlakv_bf16_to_f32(uint16_t bits) { return mlakv_bf16_bits_to_f32(bits); }

uint16_t mlakv_f32_to_bf16(float x) { return mlakv_f32_to_bf16_bits(x); }

float mlakv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    float v;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13));
    if (exp == 0)
        v = (float)man * 0x1p-24f;
    else
        v = bits_f32(((exp + 112u) << 23) | (man << 13));
    return sign ? -v : v;
}

uint16_t mlakv_f32_to_f16(float x) {
    uint32_t u = f32_bits(x), sign = (u >> 16) & 0x8000u, abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
    if (abs >= 0x47800000u) { /* >= 65536: Inf, or rounds to Inf */
        return (uint16_t)(sign | 0x7C00u);
    }
    uint32_t code = round_to_minifloat(abs, 10, -14, 15);
    if (code >= 0x7C00u) code = 0x7C00u; /* overflow rounds to Inf (IEEE) */
    return (uint16_t)(sign | code);
}

size_t mlakv_dtype_bytes(mlakv_dtype dtype) {
    switch (dtype) {
    case MLAKV_F32: return 4;
    case MLAKV_BF16:
    case MLAKV_F16: return 2;
    default: return 0;
    }
}

float mlakv_load_as_f32(const void *base, mlakv_dtype dtype, int64_t i) {
    const unsigned char *p = (const unsigned char *)base;
    if (dtype == MLAKV_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dtype == MLAKV_BF16 ? mlakv_bf16_to_f32(h) : mlakv_f16_to_f32(h);
}
