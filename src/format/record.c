/* The scalar reference codec of every record format, following FORMATS.md recipe by recipe.
 * All math is fp32, in the order the recipes give, so that the bytes are reproducible. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "common/status.h"
#include "core/validate.h"
#include "format/format.h"
#include "format/records.h"
#include "format/scalar.h"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* max |x_i| over n values; NaN does not raise it (comparison with NaN is false). */
static float amax_of(const float *x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

/* ---- NVFP4 latent (shared by the 432-B and both 368-B records) ---------------------------- */

/* ---- accurate encoder (MLAKV_NVFP4_ENCODER_ACCURATE) ----
 * Squared reconstruction error of a group x[16] stored with scale byte b: the nibbles are the
 * recipe's for that byte (RNE of |x| * inv, saturating at 6, inv = 1/d, two-level (1/d) * inv_t),
 * the stored magnitude v = e2m1 * d (two-level: (e2m1 * d) * s_t, as the reader computes it),
 * e = |x| - v, and the error is the sum of two fp32 fma chains, err_h = fma(e, e, err_h) over
 * elements 8h .. 8h + 7 in order from 0, added last: err_0 + err_1. b == 0 stores zeros
 * (e = |x|). Every step is one IEEE fp32 operation, so a GPU writer reproduces it bit for bit
 * (a lane pair holds the two halves of a group there). */
static float nvfp4_group_error(const float *x, uint8_t b, float s_t, float inv_t, int two_level) {
    const float d = mlakv_e4m3_value(b);
    float inv = b == 0 ? 0.0f : 1.0f / d;
    if (two_level) inv = inv * inv_t;
    float err[2] = {0.0f, 0.0f};
    for (int h = 0; h < 2; h++)
        for (int i = 8 * h; i < 8 * h + 8; i++) {
            const float ax = fabsf(x[i]);
            float v = 0.0f;
            if (b != 0) {
                v = mlakv_e2m1_values[mlakv_e2m1_encode(ax * inv)] * d; /* exact product */
                if (two_level) v = v * s_t;
            }
            const float e = ax - v;
            err[h] = fmaf(e, e, err[h]);
        }
    return err[0] + err[1];
}

/* The accurate encoder's byte for a group whose standard byte is sb: the candidates
 * sb - 1, sb, sb + 1 inside [0, 0x7E] in ascending order, the first of the smallest error.
 * Searched only for finite groups with amax < 2^60 (the errors then stay finite) and, in the
 * two-level record, a finite s_t; others keep sb. Why these three: on layer-like synthetic data
 * (0.02 <= max |x| <= 5.2) the winners of a search over sb - 8 .. sb + 2 were sb - 2 .. sb + 2
 * only, and sb - 1 .. sb + 1 keeps all but about 0.5 % of that gain (a search over all 127
 * bytes gains at most a few % more MSE at max |x| >= 1); the GPU writer pays per candidate. */
static uint8_t nvfp4_accurate_byte(const float *x, float amax, uint8_t sb, float s_t,
                                   float inv_t, int two_level) {
    if (!(amax < 0x1p60f) || (two_level && !(s_t < INFINITY))) return sb;
    for (int i = 0; i < 16; i++)
        if (!isfinite(x[i])) return sb;
    const int lo = sb > 0 ? sb - 1 : 0, hi = sb < 0x7E ? sb + 1 : 0x7E;
    uint8_t best = sb;
    float best_err = INFINITY;
    for (int b = lo; b <= hi; b++) {
        const float err = nvfp4_group_error(x, (uint8_t)b, s_t, inv_t, two_level);
        if (err < best_err) best_err = err, best = (uint8_t)b;
    }
    return best;
}

/* One 16-value group: scale byte from s (already the recipe's fp32 scale; the accurate encoder
 * may move it to a neighbour), then nibbles of x * (1/d) * extra_inv. extra_inv is 1 for the
 * static formats and inv_t (s_t its inverse) for the two-level. */
static void encode_nvfp4_group(const float *x, float amax, float s, float s_t, float extra_inv,
                               int two_level, int accurate, unsigned char *payload,
                               unsigned char *scale_byte) {
    uint8_t sb = mlakv_e4m3_encode(s);
    if (accurate) sb = nvfp4_accurate_byte(x, amax, sb, s_t, extra_inv, two_level);
    float d = mlakv_e4m3_decode(sb);
    *scale_byte = sb;
    if (d == 0.0f) {
        memset(payload, 0, 8);
        return;
    }
    /* d is NaN only when s was (an Inf latent in a two-level token): then every q is NaN and
     * encodes to 0, and the scale byte stays 0x7F, as the recipe read literally gives. */
    float inv = 1.0f / d;
    if (two_level) inv = inv * extra_inv;
    for (int i = 0; i < 16; i += 2) {
        uint8_t lo = mlakv_e2m1_encode(x[i] * inv), hi = mlakv_e2m1_encode(x[i + 1] * inv);
        payload[i / 2] = (unsigned char)(lo | (hi << 4));
    }
}

static int accurate_of(const mlakv_write_options *options) {
    return options != NULL && options->nvfp4_encoder == MLAKV_NVFP4_ENCODER_ACCURATE;
}

static void encode_nvfp4_latent_static(const float *latent, unsigned char *payload,
                                       unsigned char *scales, int accurate) {
    const float inv6 = bits_f32(MLAKV_INV6_BITS);
    for (int g = 0; g < 32; g++) {
        const float *x = latent + 16 * g, amax = amax_of(x, 16);
        encode_nvfp4_group(x, amax, amax * inv6, 1.0f, 1.0f, 0, accurate, payload + 8 * g,
                           scales + g);
    }
}

static void decode_nvfp4_latent(const unsigned char *payload, const unsigned char *scales,
                                float outer, int has_outer, float *latent) {
    for (int g = 0; g < 32; g++) {
        const float d = mlakv_e4m3_value(scales[g]);
        float *x = latent + 16 * g;
        for (int i = 0; i < 8; i++) { /* element 2i in the low nibble, 2i+1 in the high one */
            const uint8_t byte = payload[8 * g + i];
            x[2 * i] = mlakv_e2m1_values[byte & 0xF] * d;
            x[2 * i + 1] = mlakv_e2m1_values[byte >> 4] * d;
        }
        if (has_outer)
            for (int i = 0; i < 16; i++) x[i] *= outer;
    }
}

/* The bf16 RoPE field is a raw copy of the input: a value that is exactly a bf16 (every bf16
 * input, signalling NaNs included) keeps its bits; others (fp32, fp16 inputs) are rounded to
 * nearest even, a NaN among them quieted. */
static void encode_bf16_rope(const float *rope, uint16_t *out) {
    for (int j = 0; j < 64; j++) {
        uint32_t u;
        memcpy(&u, &rope[j], 4);
        out[j] = (u & 0xFFFFu) == 0 ? (uint16_t)(u >> 16) : mlakv_f32_to_bf16(rope[j]);
    }
}

static void decode_bf16_rope(const uint16_t *in, float *rope) {
    for (int j = 0; j < 64; j++) rope[j] = mlakv_bf16_bits_to_f32(in[j]);
}

/* Scaled E4M3 RoPE of the 368-B records: scale = amax * (1/448); bytes = E4M3(v * (1/scale)).
 * Guard: when 1/scale is not finite (scale 0, or rope amax below ~1.3e-36), the RoPE is stored
 * as zero with scale 0 (otherwise 0 * inf would make NaN bytes for the zero entries). */
static void encode_fp8_rope(const float *rope, mlakv_rec_nvfp4_fp8_rope *r) {
    float scale = amax_of(rope, 64) * bits_f32(MLAKV_INV448_BITS);
    float inv = scale == 0.0f ? INFINITY : 1.0f / scale;
    if (isinf(inv)) {
        r->rope_scale = 0.0f;
        memset(r->rope, 0, sizeof r->rope);
        return;
    }
    r->rope_scale = scale;
    for (int j = 0; j < 64; j++) r->rope[j] = mlakv_e4m3_encode(rope[j] * inv);
}

static void decode_fp8_rope(const mlakv_rec_nvfp4_fp8_rope *r, float *rope) {
    for (int j = 0; j < 64; j++) rope[j] = mlakv_e4m3_value(r->rope[j]) * r->rope_scale;
}

/* ---- nvfp4_ds_mla (432 B) ------------------------------------------------------------------ */

static void encode_nvfp4_ds_mla(const float *latent, const float *rope, unsigned char *record,
                                const mlakv_write_options *options) {
    mlakv_rec_nvfp4_ds_mla r;
    memset(&r, 0, sizeof r);
    encode_nvfp4_latent_static(latent, r.latent, r.group_scale, accurate_of(options));
    encode_bf16_rope(rope, r.rope);
    memcpy(record, &r, sizeof r);
}

static void decode_nvfp4_ds_mla(const unsigned char *record, float *latent, float *rope) {
    mlakv_rec_nvfp4_ds_mla r;
    memcpy(&r, record, sizeof r);
    if (latent) decode_nvfp4_latent(r.latent, r.group_scale, 1.0f, 0, latent);
    if (rope) decode_bf16_rope(r.rope, rope);
}

/* ---- nvfp4_fp8_rope (368 B, static) -------------------------------------------------------- */

static void encode_nvfp4_fp8_rope(const float *latent, const float *rope, unsigned char *record,
                                  const mlakv_write_options *options) {
    mlakv_rec_nvfp4_fp8_rope r;
    memset(&r, 0, sizeof r);
    encode_nvfp4_latent_static(latent, r.latent, r.group_scale, accurate_of(options));
    encode_fp8_rope(rope, &r);
    memcpy(record, &r, sizeof r);
}

static void decode_nvfp4_fp8_rope(const unsigned char *record, float *latent, float *rope) {
    mlakv_rec_nvfp4_fp8_rope r;
    memcpy(&r, record, sizeof r);
    if (latent) decode_nvfp4_latent(r.latent, r.group_scale, 1.0f, 0, latent);
    if (rope) decode_fp8_rope(&r, rope);
}

/* ---- nvfp4_fp8_rope_token_scale (368 B, two-level) ----------------------------------------- */

static void encode_nvfp4_fp8_rope_token_scale(const float *latent, const float *rope,
                                              unsigned char *record,
                                              const mlakv_write_options *options) {
    mlakv_rec_nvfp4_fp8_rope r;
    memset(&r, 0, sizeof r);
    float s_t = amax_of(latent, 512) * bits_f32(MLAKV_INV2688_BITS);
    if (s_t < bits_f32(MLAKV_TWO_LEVEL_MIN_ST_BITS)) s_t = 0.0f; /* tiny token: stored as zero */
    r.token_scale = s_t;
    if (s_t != 0.0f) {
        const float inv6 = bits_f32(MLAKV_INV6_BITS);
        float inv_t = 1.0f / s_t;
        for (int g = 0; g < 32; g++) {
            const float *x = latent + 16 * g, amax = amax_of(x, 16);
            float s_g = (amax * inv_t) * inv6;
            encode_nvfp4_group(x, amax, s_g, s_t, inv_t, 1, accurate_of(options), r.latent + 8 * g,
                               r.group_scale + g);
        }
    }
    encode_fp8_rope(rope, &r);
    memcpy(record, &r, sizeof r);
}

static void decode_nvfp4_fp8_rope_token_scale(const unsigned char *record, float *latent,
                                              float *rope) {
    mlakv_rec_nvfp4_fp8_rope r;
    memcpy(&r, record, sizeof r);
    if (latent) decode_nvfp4_latent(r.latent, r.group_scale, r.token_scale, 1, latent);
    if (rope) decode_fp8_rope(&r, rope);
}

/* ---- fp8_ds_mla (656 B) -------------------------------------------------------------------- */

/* Smallest power of two >= s (s positive, finite). */
static float pow2_ceil(float s) {
    int e;
    float m = frexpf(s, &e); /* s = m * 2^e, m in [0.5, 1) */
    return m == 0.5f ? ldexpf(1.0f, e - 1) : ldexpf(1.0f, e);
}

static void encode_fp8_ds_mla(const float *latent, const float *rope, unsigned char *record,
                              const mlakv_write_options *options) {
    mlakv_fp8_scale_recipe recipe = options ? options->fp8_scale_recipe : MLAKV_FP8_SCALE_VLLM;
    mlakv_rec_fp8_ds_mla r;
    memset(&r, 0, sizeof r);
    for (int t = 0; t < 4; t++) {
        const float *x = latent + 128 * t;
        float amax = amax_of(x, 128), scale;
        if (recipe == MLAKV_FP8_SCALE_POW2) {
            scale = amax / 448.0f;
            if (!(scale >= 1e-4f)) scale = 1e-4f;
            if (isinf(scale)) scale = FLT_MAX;
            scale = pow2_ceil(scale);
        } else {
            scale = amax / 448.0f;
            if (!(scale >= FLT_MIN)) scale = FLT_MIN;
        }
        r.tile_scale[t] = scale;
        for (int i = 0; i < 128; i++) r.latent[128 * t + i] = mlakv_e4m3_encode(x[i] / scale);
    }
    encode_bf16_rope(rope, r.rope);
    memcpy(record, &r, sizeof r);
}

static void decode_fp8_ds_mla(const unsigned char *record, float *latent, float *rope) {
    mlakv_rec_fp8_ds_mla r;
    memcpy(&r, record, sizeof r);
    if (latent)
        for (int i = 0; i < 512; i++) latent[i] = mlakv_e4m3_value(r.latent[i]) * r.tile_scale[i / 128];
    if (rope) decode_bf16_rope(r.rope, rope);
}

/* ---- traits table -------------------------------------------------------------------------- */

#define NVFP4_LATENT 0, 256, 256, 32, 1, 16
static const mlakv_format_traits traits[MLAKV_FORMAT_COUNT] = {
    [MLAKV_FP8_DS_MLA] = {{"fp8_ds_mla", 656, 0, 512, 512, 4, 4, 128, MLAKV_NO_FIELD,
                           MLAKV_NO_FIELD, 528, 128, (512.0 * 8 + 4 * 32) / 512},
                          encode_fp8_ds_mla, decode_fp8_ds_mla},
    [MLAKV_NVFP4_DS_MLA] = {{"nvfp4_ds_mla", 432, NVFP4_LATENT, MLAKV_NO_FIELD, MLAKV_NO_FIELD,
                             304, 128, (256.0 * 8 + 32 * 8) / 512},
                            encode_nvfp4_ds_mla, decode_nvfp4_ds_mla},
    [MLAKV_NVFP4_FP8_ROPE] = {{"nvfp4_fp8_rope", 368, NVFP4_LATENT, MLAKV_NO_FIELD, 288, 304, 64,
                               (256.0 * 8 + 32 * 8) / 512},
                              encode_nvfp4_fp8_rope, decode_nvfp4_fp8_rope},
    [MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE] = {{"nvfp4_fp8_rope_token_scale", 368, NVFP4_LATENT, 292,
                                           288, 304, 64, (256.0 * 8 + 32 * 8 + 32) / 512},
                                          encode_nvfp4_fp8_rope_token_scale,
                                          decode_nvfp4_fp8_rope_token_scale},
};

const mlakv_format_traits *mlakv_format_traits_get(mlakv_format format) {
    if ((int)format < 0 || format >= MLAKV_FORMAT_COUNT) return NULL;
    return &traits[format];
}

const mlakv_format_info *mlakv_format_get(mlakv_format format) {
    const mlakv_format_traits *t = mlakv_format_traits_get(format);
    return t ? &t->info : NULL;
}

size_t mlakv_record_bytes(mlakv_format format) {
    const mlakv_format_traits *t = mlakv_format_traits_get(format);
    return t ? t->info.record_bytes : 0;
}

mlakv_status mlakv_format_from_name(const char *name, mlakv_format *format) {
    MLAKV_CHECK_NOT_NULL("mlakv_format_from_name", name);
    MLAKV_CHECK_NOT_NULL("mlakv_format_from_name", format);
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        if (strcmp(name, traits[f].info.name) == 0) {
            *format = (mlakv_format)f;
            return MLAKV_OK;
        }
    }
    return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT,
                      "mlakv_format_from_name: unknown format '%.*s%s' (known: fp8_ds_mla, "
                      "nvfp4_ds_mla, nvfp4_fp8_rope, nvfp4_fp8_rope_token_scale)",
                      MLAKV_QUOTE_MAX, name, mlakv_quote_tail(name));
}

mlakv_write_options mlakv_write_options_default(void) {
    mlakv_write_options o;
    o.fp8_scale_recipe = MLAKV_FP8_SCALE_VLLM;
    o.nvfp4_encoder = MLAKV_NVFP4_ENCODER_STANDARD;
    return o;
}

mlakv_status mlakv_encode_record(mlakv_format format, const float *latent, const float *rope,
                                 void *record, const mlakv_write_options *options) {
    static const char fn[] = "mlakv_encode_record";
    const mlakv_format_traits *t = mlakv_format_traits_get(format);
    if (!t) return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)format);
    MLAKV_CHECK_NOT_NULL(fn, latent);
    MLAKV_CHECK_NOT_NULL(fn, rope);
    MLAKV_CHECK_NOT_NULL(fn, record);
    MLAKV_TRY(mlakv_check_write_options(fn, options));
    if ((uintptr_t)latent % sizeof(float) != 0 || (uintptr_t)rope % sizeof(float) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: latent or rope not aligned to 4 bytes", fn);
    /* the record is assembled in a local copy and stored last: it may overlap the inputs */
    t->encode(latent, rope, (unsigned char *)record, options);
    return MLAKV_OK;
}

mlakv_status mlakv_decode_record(mlakv_format format, const void *record, float *latent,
                                 float *rope) {
    static const char fn[] = "mlakv_decode_record";
    const mlakv_format_traits *t = mlakv_format_traits_get(format);
    if (!t) return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)format);
    MLAKV_CHECK_NOT_NULL(fn, record);
    if ((uintptr_t)latent % sizeof(float) != 0 || (uintptr_t)rope % sizeof(float) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: latent or rope not aligned to 4 bytes", fn);
    /* the record is copied before anything is written, so the outputs may overlap it; they
     * may not overlap each other */
    const mlakv_span outs[2] = {
        mlakv_span_of("latent", latent, MLAKV_LATENT_DIM * sizeof(float)),
        mlakv_span_of("rope", rope, MLAKV_ROPE_DIM * sizeof(float))};
    MLAKV_TRY(mlakv_check_overlap(fn, outs, 2, NULL, 0));
    t->decode((const unsigned char *)record, latent, rope);
    return MLAKV_OK;
}
