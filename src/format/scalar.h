/* Internal helpers next to the public scalar codecs. */
#ifndef MLAKV_FORMAT_SCALAR_H
#define MLAKV_FORMAT_SCALAR_H

#include <string.h>

#include "mlakv.h"

/* Inline bf16 conversions for hot loops; mlakv_bf16_to_f32 / mlakv_f32_to_bf16 are these. */
static inline float mlakv_bf16_bits_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN (quiet bit set). */
static inline uint16_t mlakv_f32_to_bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Value tables for hot loops; mlakv_e4m3_decode / mlakv_e2m1_decode read the same ones. */
extern const float mlakv_e4m3_table[256];
static inline float mlakv_e4m3_value(uint8_t byte) { return mlakv_e4m3_table[byte]; }

static const float mlakv_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* x rounded to bf16 precision, as fp32. */
static inline float mlakv_round_bf16(float x) {
    return mlakv_bf16_bits_to_f32(mlakv_f32_to_bf16_bits(x));
}

/* Element i of a tensor of `dtype` as fp32 (exact for bf16/fp16). */
float mlakv_load_as_f32(const void *base, mlakv_dtype dtype, int64_t i);

#endif
