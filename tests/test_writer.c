/* CPU writer and reader against an independent reference written from FORMATS.md.
 *
 * - Hand-built records: exactly quantizable inputs whose bytes are known in advance (scale
 *   bytes, nibbles, tile scales, RoPE bytes picked by the test), all four formats.
 * - Recipe bit-exactness: random realistic latents (magnitudes from 1e-4 to 1e2, E4M3-subnormal
 *   group scales, outliers, zero groups, zero tokens) through mlakv_write and the reference
 *   below, every byte compared; the scale-byte and s_t recipes are also checked field by field.
 * - Per-element error bounds (stated at check_bounds) on the de-quantized values.
 * - Cache geometry: the cache is filled with a guard pattern; padded (negative) slots, unmapped
 *   slots and block padding must keep every guard byte; block sizes 1/16/61/64, dense and
 *   padded block strides, bf16/fp16/fp32 inputs with row strides whose gaps hold NaN.
 * - 64-bit slot values at or beyond capacity (incl. values that alias a valid slot when
 *   truncated to 32 bits): rejected, nothing written.
 * The reference codecs here are the test's own (table search, no bit tricks), not the
 * library's. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- independent reference codecs --------------------------------------------------------- */

static double e4m3_table[127]; /* value of positive code c, c = 0 .. 0x7E, increasing */
static const double e2m1_table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

static void init_tables(void) {
    for (int c = 0; c < 127; c++) {
        int e = c >> 3, m = c & 7;
        e4m3_table[c] = e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    }
}

/* Nearest entry of an increasing table, ties to the even code, saturating at the top. */
static int nearest_code(const double *table, int n, double a) {
    if (a >= table[n - 1]) return n - 1;
    int lo = 0, hi = n - 1; /* table[lo] <= a < table[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (table[mid] <= a) lo = mid;
        else hi = mid;
    }
    double m = (table[lo] + table[hi]) / 2; /* exact in double */
    if (a < m) return lo;
    if (a > m) return hi;
    return (lo & 1) ? hi : lo;
}

static uint8_t ref_e4m3(float x) {
    if (isnan(x)) return 0x7F;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    return (uint8_t)(sign | nearest_code(e4m3_table, 127, fabs((double)x)));
}

static double ref_e4m3_val(uint8_t b) {
    if ((b & 0x7F) == 0x7F) return NAN;
    double v = e4m3_table[b & 0x7F];
    return (b & 0x80) ? -v : v;
}

static uint8_t ref_e2m1(float x) {
    if (isnan(x)) return 0;
    uint8_t sign = signbit(x) ? 8 : 0;
    return (uint8_t)(sign | nearest_code(e2m1_table, 8, fabs((double)x)));
}

static double ref_e2m1_val(uint8_t n) {
    double v = e2m1_table[n & 7];
    return (n & 8) ? -v : v;
}

static float f32_of(uint32_t u) { return tu_bits_f32(u); }
#define INV6 f32_of(0x3E2AAAABu)
#define INV448 f32_of(0x3B124925u)
#define INV2688 f32_of(0x39C30C31u)

/* bf16 bits of an fp32 for the bf16 RoPE field ("raw copy"): a value that is exactly a bf16
 * keeps its bits (NaN payloads too); others round to nearest even, NaN quieted */
static uint16_t ref_bf16(float x) {
    uint32_t u = tu_f32_bits(x);
    if ((u & 0xFFFF) == 0) return (uint16_t)(u >> 16);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    uint32_t lower = u & 0xFFFF, upper = u >> 16;
    if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++;
    return (uint16_t)upper;
}

static float amax_of(const float *x, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > m) m = fabsf(x[i]); /* NaN never raises it */
    return m;
}

static void put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }
static float get_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static float pow2_ceil_ref(float s) { /* smallest power of two >= s, s > 0 finite */
    float p = 0x1p-126f;
    while (p < s) p *= 2.0f;
    return p;
}

/* NVFP4 group: scale byte of s, nibbles of x * inv_extra / d ((1/d) * inv_t when two-level). */
static void ref_nvfp4_group(const float *x, float s, int two_level, float inv_t, uint8_t *payload,
                            uint8_t *scale) {
    uint8_t sb = ref_e4m3(s);
    *scale = sb;
    float d = (float)ref_e4m3_val(sb);
    memset(payload, 0, 8);
    if (d == 0.0f) return;
    float inv = 1.0f / d;
    if (two_level) inv = inv * inv_t;
    for (int i = 0; i < 16; i++) {
        uint8_t nib = ref_e2m1(x[i] * inv);
        payload[i / 2] |= (uint8_t)((i & 1) ? nib << 4 : nib);
    }
}

static void ref_fp8_rope(const float *rope, uint8_t *rec) {
    float scale = amax_of(rope, 64) * INV448;
    if (scale == 0.0f) return; /* scale and bytes stay 0 */
    float inv = 1.0f / scale;
    if (isinf(inv)) return; /* the guard: RoPE stored as zero, scale 0 */
    put_f32(rec + 288, scale);
    for (int j = 0; j < 64; j++) rec[304 + j] = ref_e4m3(rope[j] * inv);
}

/* The whole record, following FORMATS.md step by step. */
static void ref_encode(mlakv_format fmt, const float *lat, const float *rope, int pow2,
                       uint8_t *rec) {
    memset(rec, 0, 656);
    if (fmt == MLAKV_FP8_DS_MLA) {
        for (int t = 0; t < 4; t++) {
            float amax = amax_of(lat + 128 * t, 128), scale;
            if (pow2) {
                scale = amax / 448.0f;
                if (scale < 1e-4f) scale = 1e-4f;
                scale = pow2_ceil_ref(scale);
            } else {
                scale = amax / 448.0f;
                if (scale < FLT_MIN) scale = FLT_MIN;
            }
            put_f32(rec + 512 + 4 * t, scale);
            for (int i = 0; i < 128; i++) rec[128 * t + i] = ref_e4m3(lat[128 * t + i] / scale);
        }
        for (int j = 0; j < 64; j++) {
            uint16_t b = ref_bf16(rope[j]);
            memcpy(rec + 528 + 2 * j, &b, 2);
        }
        return;
    }
    if (fmt == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) {
        float s_t = amax_of(lat, 512) * INV2688;
        if (s_t < 0x1p-116f) s_t = 0.0f; /* the guard: a tiny token is stored as zero */
        put_f32(rec + 292, s_t);
        if (s_t != 0.0f) {
            float inv_t = 1.0f / s_t;
            for (int g = 0; g < 32; g++) {
                float s_g = (amax_of(lat + 16 * g, 16) * inv_t) * INV6;
                ref_nvfp4_group(lat + 16 * g, s_g, 1, inv_t, rec + 8 * g, rec + 256 + g);
            }
        }
        ref_fp8_rope(rope, rec);
        return;
    }
    for (int g = 0; g < 32; g++)
        ref_nvfp4_group(lat + 16 * g, amax_of(lat + 16 * g, 16) * INV6, 0, 1.0f, rec + 8 * g,
                        rec + 256 + g);
    if (fmt == MLAKV_NVFP4_DS_MLA) {
        for (int j = 0; j < 64; j++) {
            uint16_t b = ref_bf16(rope[j]);
            memcpy(rec + 304 + 2 * j, &b, 2);
        }
    } else {
        ref_fp8_rope(rope, rec);
    }
}

/* Reference decode (double, then fp32: all products here are exact or a single rounding). */
static void ref_decode(mlakv_format fmt, const uint8_t *rec, float *lat, float *rope) {
    if (fmt == MLAKV_FP8_DS_MLA) {
        for (int i = 0; i < 512; i++)
            lat[i] = (float)(ref_e4m3_val(rec[i]) * (double)get_f32(rec + 512 + 4 * (i / 128)));
        for (int j = 0; j < 64; j++) {
            uint16_t b;
            memcpy(&b, rec + 528 + 2 * j, 2);
            rope[j] = f32_of((uint32_t)b << 16);
        }
        return;
    }
    double outer = fmt == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE ? (double)get_f32(rec + 292) : 1.0;
    for (int i = 0; i < 512; i++) {
        uint8_t nib = (uint8_t)((rec[i / 2] >> ((i & 1) * 4)) & 0xF);
        /* e2m1 * e4m3 is exact (<= 6 significant bits); one rounding for the outer scale */
        lat[i] = (float)((double)(float)(ref_e2m1_val(nib) * ref_e4m3_val(rec[256 + i / 16])) * outer);
    }
    if (fmt == MLAKV_NVFP4_DS_MLA) {
        for (int j = 0; j < 64; j++) {
            uint16_t b;
            memcpy(&b, rec + 304 + 2 * j, 2);
            rope[j] = f32_of((uint32_t)b << 16);
        }
    } else {
        for (int j = 0; j < 64; j++)
            rope[j] = (float)(ref_e4m3_val(rec[304 + j]) * (double)get_f32(rec + 288));
    }
}

static const size_t rec_bytes[4] = {656, 432, 368, 368};
static const char *const fmt_names[4] = {"fp8_ds_mla", "nvfp4_ds_mla", "nvfp4_fp8_rope",
                                         "nvfp4_fp8_rope_token_scale"};

static int same_f32(float a, float b) {
    return (isnan(a) && isnan(b)) || tu_f32_bits(a) == tu_f32_bits(b);
}

/* First differing byte of two records, described ("" if equal). */
static int diff_record(const uint8_t *got, const uint8_t *want, size_t n, char *msg, size_t cap) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            snprintf(msg, cap, "byte %zu: got %02x want %02x", i, got[i], want[i]);
            return 1;
        }
    }
    msg[0] = '\0';
    return 0;
}

/* ---- error bounds --------------------------------------------------------------------------
 * Stated bounds per element, x the exact input value, y the de-quantized value:
 *  NVFP4 (static): group scale d = e4m3(scale byte). If |x|/d <= 6 the error is at most half
 *    the E2M1 grid gap at that point (<= 1.0 d, gap 2 between 4 and 6); above 6 it saturates:
 *    |x - y| = |x| - 6d. So |x - y| <= max(d, |x| - 6d). When the group scale is an E4M3
 *    normal (d >= 2^-6) d is within 2^-4 relative of amax/6, the saturation term stays below
 *    0.4 d, and |x - y| <= 1.25 d holds (the bound). When it is E4M3-subnormal
 *    (amax < 6 * 2^-6) the relative scale error is unbounded (d may round to 0): there the
 *    bound is absolute, |x - y| <= max(1.25 d, 6 * 2^-10) (|s - d| <= 2^-10).
 *  NVFP4 two-level: the same with d replaced by D = d * s_t, and 2^-6, 2^-10 scaled by s_t.
 *  fp8 latent / E4M3 RoPE with fp32 scale S (|x|/S <= 448 by construction): E4M3 rounding,
 *    |x - y| <= max(2^-4 |x|, 2^-10 S) (half an ulp: relative 2^-4 in the normal range,
 *    absolute 2^-10 S in the subnormal range). A "1.25 x scale" bound would be wrong here:
 *    half an ulp near 448 is 16 S.
 *  bf16 RoPE: |x - y| <= 2^-8 |x| (round to nearest, 8 significant bits).
 * Each bound gets a relative slack of 2^-20 for the fp32 rounding of x * (1/d) and of the
 * decode product. */
static void check_bounds(mlakv_format fmt, const float *x, const float *rx, const float *y,
                         const float *ry, const uint8_t *rec, const char *what) {
    const double slack = 0x1p-20;
    int bad = 0, bad_i = -1;
    double bad_err = 0, bad_bound = 0;
    if (fmt == MLAKV_FP8_DS_MLA) {
        for (int i = 0; i < 512 && !bad; i++) {
            double S = get_f32(rec + 512 + 4 * (i / 128)), err = fabs((double)x[i] - y[i]);
            double bound = fmax(ldexp(fabs(x[i]), -4), ldexp(S, -10)) * (1 + slack);
            if (!(err <= bound)) bad = 1, bad_i = i, bad_err = err, bad_bound = bound;
        }
    } else {
        double outer = fmt == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE ? get_f32(rec + 292) : 1.0;
        for (int i = 0; i < 512 && !bad; i++) {
            double d = ref_e4m3_val(rec[256 + i / 16]) * outer;
            double err = fabs((double)x[i] - y[i]);
            double tight = fmax(d, fabs(x[i]) - 6 * d) * (1 + slack) + ldexp(fabs(x[i]), -22);
            double loose = d >= ldexp(outer, -6) ? 1.25 * d : fmax(1.25 * d, 6 * ldexp(outer, -10));
            loose = loose * (1 + slack) + ldexp(fabs(x[i]), -22);
            /* static formats: a group with amax > 6 * 448 saturates its scale at 448; only the
             * tight bound applies there (the two-level format never saturates) */
            if (fmt != MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE && (double)amax_of(x + 16 * (i / 16), 16) * (1.0 / 6) > 448) loose = INFINITY;
            if (!(err <= tight) || !(err <= loose))
                bad = 1, bad_i = i, bad_err = err, bad_bound = fmin(tight, loose);
        }
    }
    for (int j = 0; j < 64 && !bad; j++) {
        double err = fabs((double)rx[j] - ry[j]), bound;
        if (fmt == MLAKV_FP8_DS_MLA || fmt == MLAKV_NVFP4_DS_MLA)
            bound = ldexp(fabs(rx[j]), -8);
        else
            bound = fmax(ldexp(fabs(rx[j]), -4), ldexp(get_f32(rec + 288), -10)) * (1 + slack);
        if (!(err <= bound)) bad = 1, bad_i = 512 + j, bad_err = err, bad_bound = bound;
    }
    CHECKF(!bad, "%s %s: element %d (>= 512: rope) error %.9g > bound %.9g", fmt_names[fmt], what,
           bad_i, bad_err, bad_bound);
}

/* ---- input generation ----------------------------------------------------------------------- */

/* Round a value to what `dtype` can hold (the writer sees exactly this). */
static float to_dtype(float v, mlakv_dtype dt) {
    if (dt == MLAKV_BF16) return mlakv_bf16_to_f32(mlakv_f32_to_bf16(v));
    if (dt == MLAKV_F16) return mlakv_f16_to_f32(mlakv_f32_to_f16(v));
    return v;
}

/* Realistic latent: per-token magnitude 2^[-12, 6], per-group spread, rare outliers, some
 * zero groups, some all-zero tokens, some groups in the E4M3-subnormal scale range. */
static void gen_token(tu_rng *r, mlakv_dtype dt, float *lat, float *rope) {
    int kind = (int)tu_range(r, 0, 40);
    double tok = ldexp(1.0, (int)tu_range(r, -12, 7)) * (0.5 + tu_uniform(r));
    if (dt == MLAKV_F16) tok = fmin(tok, 8.0); /* keep fp16 inputs away from overflow */
    for (int g = 0; g < 32; g++) {
        double gm = tok * ldexp(1.0, (int)tu_range(r, -6, 2)) * (0.5 + tu_uniform(r));
        int zero_group = tu_range(r, 0, 16) == 0;
        for (int i = 0; i < 16; i++) {
            double v = tu_normal(r) * gm;
            if (tu_range(r, 0, 200) == 0) v *= 30; /* outlier */
            lat[16 * g + i] = zero_group || kind == 0 ? 0.0f : to_dtype((float)v, dt);
        }
    }
    double rm = ldexp(1.0, (int)tu_range(r, -8, 5)) * (0.5 + tu_uniform(r));
    for (int j = 0; j < 64; j++)
        rope[j] = kind == 1 ? 0.0f : to_dtype((float)(tu_normal(r) * rm), dt);
}

/* ---- 1. hand-built records with known bytes ------------------------------------------------ */

/* Random positive E4M3 code whose value v satisfies 6 v <= 448 and (for fp16) stays exact. */
static uint8_t random_scale_code(tu_rng *r, int lo, int hi) { return (uint8_t)tu_range(r, lo, hi); }

static void test_hand_built(tu_rng *r) {
    const mlakv_dtype dts[3] = {MLAKV_F32, MLAKV_BF16, MLAKV_F16};
    for (int trial = 0; trial < 200; trial++) {
        mlakv_dtype dt = dts[trial % 3];
        float lat[512], rope[64];
        uint8_t want[656], got[656];
        char msg[128];

        /* NVFP4 static (432 and 368-B latent): group g has scale code c_g (some groups zero),
         * element values v * e4m3(c_g) with v on the E2M1 grid and one +-6 per group so that
         * amax * (1/6) rounds back to c_g. */
        for (int f = 1; f <= 2; f++) {
            memset(want, 0, sizeof want);
            for (int g = 0; g < 32; g++) {
                int zero = tu_range(r, 0, 8) == 0;
                /* codes 0x01 .. 0x6E: values 2^-9 .. 240 (6 * 240 = 1440 fits fp16) */
                uint8_t c = zero ? 0 : random_scale_code(r, 1, 0x6F);
                double d = e4m3_table[c];
                int big = (int)tu_range(r, 0, 16);
                want[256 + g] = c;
                for (int i = 0; i < 16; i++) {
                    int e = 16 * g + i;
                    uint8_t nib = zero ? 0 : (uint8_t)tu_range(r, 0, 16);
                    if (!zero && i == big) nib = (uint8_t)((nib & 8) | 7);
                    lat[e] = (float)(ref_e2m1_val(nib) * d);
                    if (nib == 8) lat[e] = -0.0f; /* -0 input: the sign survives (header) */
                    want[e / 2] |= (uint8_t)((e & 1) ? nib << 4 : nib);
                }
            }
            if (f == 1) { /* bf16 RoPE: raw copy */
                for (int j = 0; j < 64; j++) {
                    uint16_t b = (uint16_t)(tu_range(r, 0x3000, 0x4400) | (tu_range(r, 0, 2) << 15));
                    rope[j] = f32_of((uint32_t)b << 16);
                    memcpy(want + 304 + 2 * j, &b, 2);
                }
            } else { /* E4M3 RoPE: values e4m3(b_j) * 2^k, one of them +-448 * 2^k */
                int k = (int)tu_range(r, -10, 4);
                int big = (int)tu_range(r, 0, 64);
                for (int j = 0; j < 64; j++) {
                    uint8_t b = (uint8_t)tu_range(r, 0, 0x7F) | (uint8_t)(tu_range(r, 0, 2) << 7);
                    if (j == big) b = (uint8_t)((b & 0x80) | 0x7E);
                    rope[j] = (float)ldexp(ref_e4m3_val(b), k);
                    want[304 + j] = b;
                }
                /* stored scale: the recipe's own fp32 product (448 * 2^k) * fl(1/448) */
                put_f32(want + 288, (float)ldexp(448.0, k) * INV448);
            }
            for (int i = 0; i < 512; i++) lat[i] = to_dtype(lat[i], dt);
            CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, got, NULL));
            CHECKF(!diff_record(got, want, rec_bytes[f], msg, sizeof msg), "hand-built %s: %s",
                   fmt_names[f], msg);
            float ylat[512], yrope[64];
            CHECK_OK(mlakv_decode_record((mlakv_format)f, got, ylat, yrope));
            int exact = 1;
            for (int i = 0; i < 512; i++) exact &= ylat[i] == lat[i];
            for (int j = 0; j < 64; j++) /* E4M3 RoPE: scale = 2^k (1 + rounding), not exact */
                exact &= f == 1 ? yrope[j] == rope[j]
                                : yrope[j] == (float)(ref_e4m3_val(want[304 + j]) * get_f32(want + 288));
            CHECKF(exact, "hand-built %s: decode is not the exact input", fmt_names[f]);
        }

        /* Two-level: token amax A = 2688 * 2^k lands at scale byte 0x7E (448) in its group;
         * other groups get amax 6 * e4m3(c) * 2^k and scale byte c. s_t = fl(A * fl(1/2688)). */
        {
            memset(want, 0, sizeof want);
            int k = (int)tu_range(r, -14, -1);
            int top = (int)tu_range(r, 0, 32);
            for (int g = 0; g < 32; g++) {
                int zero = g != top && tu_range(r, 0, 8) == 0;
                uint8_t c = zero ? 0 : (g == top ? 0x7E : random_scale_code(r, 0x30, 0x7E));
                double d = e4m3_table[c];
                int big = (int)tu_range(r, 0, 16);
                want[256 + g] = c;
                for (int i = 0; i < 16; i++) {
                    int e = 16 * g + i;
                    uint8_t nib = zero ? 0 : (uint8_t)tu_range(r, 0, 8);
                    if (!zero && i == big) nib = 7;
                    if (tu_range(r, 0, 2) && nib) nib |= 8;
                    lat[e] = (float)ldexp(ref_e2m1_val(nib) * d, k);
                    want[e / 2] |= (uint8_t)((e & 1) ? nib << 4 : nib);
                }
            }
            for (int j = 0; j < 64; j++) rope[j] = 0.0f; /* zero RoPE: scale 0, bytes 0 */
            float s_t = (float)ldexp(2688.0, k) * INV2688;
            put_f32(want + 292, s_t);
            for (int i = 0; i < 512; i++) lat[i] = to_dtype(lat[i], dt);
            CHECK_OK(mlakv_encode_record(MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, lat, rope, got, NULL));
            CHECKF(!diff_record(got, want, 368, msg, sizeof msg), "hand-built two-level: %s", msg);
        }

        /* fp8_ds_mla: tile amax 448 * 2^k -> scale 2^k exactly under both recipes (2^k >=
         * 2^-13 > 1e-4 for pow2); values e4m3(b) * 2^k -> bytes b. */
        for (int pow2 = 0; pow2 <= 1; pow2++) {
            memset(want, 0, sizeof want);
            for (int t = 0; t < 4; t++) {
                int k = (int)tu_range(r, dt == MLAKV_F16 ? -5 : -13, dt == MLAKV_F16 ? 5 : 8);
                int big = (int)tu_range(r, 0, 128);
                put_f32(want + 512 + 4 * t, (float)ldexp(1.0, k));
                for (int i = 0; i < 128; i++) {
                    uint8_t b = (uint8_t)(tu_range(r, 0, 0x7F) | (tu_range(r, 0, 2) << 7));
                    if (i == big) b = (uint8_t)((b & 0x80) | 0x7E);
                    lat[128 * t + i] = (float)ldexp(ref_e4m3_val(b), k);
                    want[128 * t + i] = b;
                }
            }
            for (int j = 0; j < 64; j++) {
                uint16_t b = (uint16_t)tu_range(r, 0x3800, 0x4000);
                rope[j] = f32_of((uint32_t)b << 16);
                memcpy(want + 528 + 2 * j, &b, 2);
            }
            for (int i = 0; i < 512; i++) lat[i] = to_dtype(lat[i], dt);
            mlakv_write_options o = mlakv_write_options_default();
            o.fp8_scale_recipe = pow2 ? MLAKV_FP8_SCALE_POW2 : MLAKV_FP8_SCALE_VLLM;
            CHECK_OK(mlakv_encode_record(MLAKV_FP8_DS_MLA, lat, rope, got, &o));
            CHECKF(!diff_record(got, want, 656, msg, sizeof msg), "hand-built fp8 (%s): %s",
                   pow2 ? "pow2" : "vllm", msg);
        }
    }
}

/* ---- 2-4. recipe bit-exactness, bounds, zero groups/tokens, per-token scale range ---------- */

static void test_recipes(tu_rng *r, int tokens) {
    const mlakv_dtype dts[3] = {MLAKV_F32, MLAKV_BF16, MLAKV_F16};
    long mismatches = 0;
    int zero_tokens = 0;
    for (int n = 0; n < tokens; n++) {
        mlakv_dtype dt = dts[n % 3];
        float lat[512], rope[64], ylat[512], yrope[64], rlat[512], rrope[64];
        gen_token(r, dt, lat, rope);
        zero_tokens += amax_of(lat, 512) == 0.0f;
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            for (int pow2 = 0; pow2 <= (f == 0); pow2++) {
                uint8_t want[656], got[656];
                char msg[128];
                mlakv_write_options o = mlakv_write_options_default();
                o.fp8_scale_recipe = pow2 ? MLAKV_FP8_SCALE_POW2 : MLAKV_FP8_SCALE_VLLM;
                ref_encode((mlakv_format)f, lat, rope, pow2, want);
                memset(got, 0xA5, sizeof got);
                CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, got, pow2 ? &o : NULL));
                if (diff_record(got, want, rec_bytes[f], msg, sizeof msg)) {
                    if (++mismatches <= 10)
                        CHECKF(0, "recipe %s%s token %d: %s", fmt_names[f], pow2 ? " pow2" : "", n,
                               msg);
                    continue;
                }
                /* the recipe fields one by one (also covered by the full compare above) */
                if (f != 0) {
                    float outer = 1.0f, inv_t = 1.0f;
                    if (f == 3) {
                        float s_t = amax_of(lat, 512) * INV2688;
                        CHECK(tu_f32_bits(get_f32(got + 292)) == tu_f32_bits(s_t));
                        outer = s_t;
                        inv_t = s_t != 0.0f ? 1.0f / s_t : 0.0f;
                        /* the largest group's scale lands near the top of the E4M3 range */
                        if (s_t != 0.0f) {
                            double top = 0;
                            for (int g = 0; g < 32; g++) top = fmax(top, ref_e4m3_val(got[256 + g]));
                            CHECKF(top >= 256.0, "two-level token %d: largest group scale %g < 256",
                                   n, top);
                        }
                    }
                    for (int g = 0; g < 32 && outer != 0.0f; g++) {
                        float am = amax_of(lat + 16 * g, 16);
                        float s = f == 3 ? (am * inv_t) * INV6 : am * INV6;
                        if (got[256 + g] != ref_e4m3(s)) {
                            CHECKF(0, "%s token %d group %d: scale byte %02x, want E4M3(%a) = %02x",
                                   fmt_names[f], n, g, got[256 + g], s, ref_e4m3(s));
                            break;
                        }
                    }
                }
                memset(ylat, 0xFF, sizeof ylat); /* NaN poison */
                memset(yrope, 0xFF, sizeof yrope);
                CHECK_OK(mlakv_decode_record((mlakv_format)f, got, ylat, yrope));
                ref_decode((mlakv_format)f, want, rlat, rrope);
                int same = 1;
                for (int i = 0; i < 512; i++) same &= same_f32(ylat[i], rlat[i]);
                for (int j = 0; j < 64; j++) same &= same_f32(yrope[j], rrope[j]);
                CHECKF(same, "decode %s token %d differs from the reference decode", fmt_names[f], n);
                check_bounds((mlakv_format)f, lat, rope, ylat, yrope, got, "random token");
                /* zero groups: scale byte 0 and payload 0; zero token: latent part all zero */
                if (f != 0) {
                    for (int g = 0; g < 32; g++) {
                        if (amax_of(lat + 16 * g, 16) != 0.0f) continue;
                        int z = got[256 + g] == 0;
                        for (int b = 0; b < 8; b++) z &= got[8 * g + b] == 0;
                        CHECKF(z, "%s token %d: zero group %d is not all-zero bytes", fmt_names[f], n, g);
                    }
                }
            }
        }
    }
    CHECKF(mismatches == 0, "%ld records differ from the reference recipe", mismatches);
    CHECKF(zero_tokens > 0, "generator produced no zero token in %d", tokens);
}

/* Explicit zero and -0 tokens: every format. */
static void test_zero_tokens(void) {
    float lat[512], rope[64], y[512], yr[64];
    uint8_t got[656];
    for (int neg = 0; neg <= 1; neg++) {
        for (int i = 0; i < 512; i++) lat[i] = neg ? -0.0f : 0.0f;
        for (int j = 0; j < 64; j++) rope[j] = neg ? -0.0f : 0.0f;
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            for (int pow2 = 0; pow2 <= 1; pow2++) {
                mlakv_write_options o = {pow2 ? MLAKV_FP8_SCALE_POW2 : MLAKV_FP8_SCALE_VLLM,
                                 MLAKV_NVFP4_ENCODER_STANDARD};
                memset(got, 0x5A, sizeof got);
                CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, got, &o));
                if (f == 0) { /* tile scale FLT_MIN (vLLM) or 2^-13 (pow2); bytes +-0 */
                    float want_scale = pow2 ? 0x1p-13f : FLT_MIN;
                    for (int t = 0; t < 4; t++)
                        CHECKF(get_f32(got + 512 + 4 * t) == want_scale, "fp8 zero tile scale %a",
                               get_f32(got + 512 + 4 * t));
                    int z = 1;
                    for (int i = 0; i < 512; i++) z &= got[i] == (neg ? 0x80 : 0x00);
                    for (int j = 0; j < 64; j++) /* bf16 +-0 */
                        z &= got[528 + 2 * j] == 0 && got[529 + 2 * j] == (neg ? 0x80 : 0x00);
                    CHECKF(z, "fp8_ds_mla: zero token (%s0) bytes", neg ? "-" : "+");
                } else { /* scale 0 -> payload 0, whatever the sign; padding 0; RoPE scale 0 */
                    int z = 1;
                    for (size_t i = 0; i < rec_bytes[f]; i++) {
                        uint8_t w = 0;
                        if (f == 1 && i >= 304 && (i & 1) && neg) w = 0x80; /* bf16 -0 */
                        z &= got[i] == w;
                    }
                    CHECKF(z, "%s: zero token (%s0) not all-zero latent/scales/padding", fmt_names[f],
                           neg ? "-" : "+");
                }
                CHECK_OK(mlakv_decode_record((mlakv_format)f, got, y, yr));
                int z = 1;
                for (int i = 0; i < 512; i++) z &= y[i] == 0.0f;
                for (int j = 0; j < 64; j++) z &= yr[j] == 0.0f;
                CHECKF(z, "%s: zero token decodes to non-zero", fmt_names[f]);
            }
        }
    }
}

/* NaN and Inf in the input: NaN does not raise amax, results follow the recipe literally. */
static void test_specials(tu_rng *r) {
    for (int trial = 0; trial < 300; trial++) {
        float lat[512], rope[64];
        gen_token(r, MLAKV_F32, lat, rope);
        int k = (int)tu_range(r, 1, 4);
        for (int s = 0; s < k; s++) {
            float v = tu_range(r, 0, 3) == 0 ? INFINITY : NAN;
            if (tu_range(r, 0, 2)) v = -v;
            if (tu_range(r, 0, 4) == 0) rope[tu_range(r, 0, 64)] = isnan(v) ? v : 1.0f;
            else lat[tu_range(r, 0, 512)] = v;
        }
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            uint8_t want[656], got[656];
            char msg[128];
            ref_encode((mlakv_format)f, lat, rope, 0, want);
            CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, got, NULL));
            CHECKF(!diff_record(got, want, rec_bytes[f], msg, sizeof msg), "NaN/Inf input %s: %s",
                   fmt_names[f], msg);
        }
    }
}

/* ---- tiny tokens and raw bf16 RoPE ----------------------------------------------------------
 * FORMATS.md's guards for the 368-B records: a two-level token with s_t < 2^-116 is stored as
 * zero (s_t 0, latent bytes and scales 0), and a RoPE whose scale has no finite reciprocal is
 * stored as zero with scale 0. Without them a tiny token made NaN scale bytes (0x7F: 0 * inf)
 * or saturated nibbles, and every attention row selecting it was NaN. Checked at the boundary
 * values (the bf16 and fp32 values just below and at each threshold) and over a sweep of
 * magnitudes: the stored bytes follow the guard, every decoded value is finite, and above the
 * thresholds every element is within the stated error bounds. */

/* first positive bf16 (bits) v with pred(v); 0 if none */
static uint16_t first_bf16(int (*pred)(float)) {
    for (uint32_t b = 1; b < 0x7F80; b++)
        if (pred(f32_of(b << 16))) return (uint16_t)b;
    return 0;
}
static int st_kept(float amax) { return amax * INV2688 >= 0x1p-116f; }
static int rope_kept(float amax) {
    float scale = amax * INV448;
    return scale != 0.0f && !isinf(1.0f / scale);
}
/* first positive fp32 v with pred(v), by bisection on the bit pattern (pred is monotone) */
static float first_f32(int (*pred)(float)) {
    uint32_t lo = 0, hi = 0x7F7FFFFF; /* pred(lo) false, pred(hi) true */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pred(f32_of(mid))) hi = mid;
        else lo = mid;
    }
    return f32_of(hi);
}

/* A token whose latent max is amax (element 5) with groups spread far below it (some groups
 * with E4M3-subnormal scale bytes: their values are 2^-8 .. 2^-16 of amax), all values bf16. */
static void tiny_token(tu_rng *r, float amax, float rope_amax, float *lat, float *rope) {
    for (int g = 0; g < 32; g++) {
        int k = g == 0 ? 0 : (int)tu_range(r, 0, 17);
        for (int i = 0; i < 16; i++) {
            float v = (g & 3) == 3 ? 0.0f : ldexpf(amax * (float)tu_uniform(r), -k);
            lat[16 * g + i] = to_dtype(tu_range(r, 0, 2) ? -v : v, MLAKV_BF16);
        }
    }
    lat[5] = amax;
    for (int j = 0; j < 64; j++)
        rope[j] = j % 5 == 0 ? 0.0f : to_dtype(rope_amax * (float)tu_uniform(r), MLAKV_BF16);
    rope[7] = rope_amax;
}

/* Encode one tiny token in both 368-B formats (and the others) and check it. */
static void check_tiny(const float *lat, const float *rope, const char *what) {
    const float amax = amax_of(lat, 512), ramax = amax_of(rope, 64);
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        uint8_t got[656], want[656];
        float y[512], yr[64];
        char msg[128];
        CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, got, NULL));
        ref_encode((mlakv_format)f, lat, rope, 0, want);
        CHECKF(!diff_record(got, want, rec_bytes[f], msg, sizeof msg), "%s %s: %s", what,
               fmt_names[f], msg);
        CHECK_OK(mlakv_decode_record((mlakv_format)f, got, y, yr));
        int finite = 1;
        for (int i = 0; i < 512; i++) finite &= isfinite(y[i]);
        for (int j = 0; j < 64; j++) finite &= isfinite(yr[j]);
        CHECKF(finite, "%s %s: a decoded value is not finite", what, fmt_names[f]);
        if (f >= MLAKV_NVFP4_DS_MLA) {
            int no_nan_scale = 1;
            for (int g = 0; g < 32; g++) no_nan_scale &= (got[256 + g] & 0x7F) != 0x7F;
            CHECKF(no_nan_scale, "%s %s: a NaN group scale byte", what, fmt_names[f]);
        }
        if (f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) {
            if (!st_kept(amax)) {
                int z = get_f32(got + 292) == 0.0f;
                for (int i = 0; i < 288; i++) z &= got[i] == 0;
                CHECKF(z, "%s: s_t %a below 2^-116 but the latent is not stored as zero", what,
                       amax * INV2688);
            } else {
                CHECKF(get_f32(got + 292) == amax * INV2688, "%s: s_t %a, want %a", what,
                       get_f32(got + 292), amax * INV2688);
            }
        }
        if (f == MLAKV_NVFP4_FP8_ROPE || f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) {
            if (!rope_kept(ramax)) {
                int z = get_f32(got + 288) == 0.0f;
                for (int j = 0; j < 64; j++) z &= got[304 + j] == 0;
                CHECKF(z, "%s %s: RoPE scale without a finite reciprocal not stored as zero",
                       what, fmt_names[f]);
            } else {
                int ok = get_f32(got + 288) == ramax * INV448;
                for (int j = 0; j < 64; j++) ok &= got[304 + j] != 0x7F && got[304 + j] != 0xFF;
                CHECKF(ok, "%s %s: RoPE scale %a (want %a) or a NaN RoPE byte", what,
                       fmt_names[f], get_f32(got + 288), ramax * INV448);
            }
        }
        /* above the thresholds the usual per-element bounds hold (fp8_ds_mla has no guard;
         * its tiny tiles decode into the fp32 subnormal range, which those bounds do not
         * model) */
        if (f == MLAKV_FP8_DS_MLA) continue;
        int latent_kept = f != MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE || st_kept(amax);
        int rope_kept_f = f < MLAKV_NVFP4_FP8_ROPE || rope_kept(ramax);
        if (latent_kept && rope_kept_f) check_bounds((mlakv_format)f, lat, rope, y, yr, got, what);
    }
}

static void test_tiny_tokens(tu_rng *r) {
    float lat[512], rope[64];
    char what[96];
    /* the thresholds in bf16 and fp32, and the values just below them */
    const uint16_t st_b = first_bf16(st_kept), rope_b = first_bf16(rope_kept);
    CHECK(st_b > 1 && rope_b > 1);
    const float st_at[4] = {f32_of((uint32_t)(st_b - 1) << 16), f32_of((uint32_t)st_b << 16),
                            nextafterf(first_f32(st_kept), 0.0f), first_f32(st_kept)};
    const float rope_at[4] = {f32_of((uint32_t)(rope_b - 1) << 16), f32_of((uint32_t)rope_b << 16),
                              nextafterf(first_f32(rope_kept), 0.0f), first_f32(rope_kept)};
    CHECK(!st_kept(st_at[0]) && st_kept(st_at[1]) && !st_kept(st_at[2]) && st_kept(st_at[3]));
    CHECK(!rope_kept(rope_at[0]) && rope_kept(rope_at[1]) && !rope_kept(rope_at[2]) &&
          rope_kept(rope_at[3]));
    /* about 3.2e-32 and 1.3e-36 (FORMATS.md) */
    CHECKF(st_at[3] > 3.1e-32f && st_at[3] < 3.3e-32f, "s_t threshold amax %g", st_at[3]);
    CHECKF(rope_at[3] > 1.2e-36f && rope_at[3] < 1.4e-36f, "rope threshold amax %g", rope_at[3]);
    for (int k = 0; k < 4; k++) {
        for (int trial = 0; trial < 20; trial++) {
            /* the latent at the s_t boundary with an ordinary RoPE, and the reverse */
            tiny_token(r, st_at[k], 1.0f, lat, rope);
            if (k >= 2) lat[5] = st_at[k]; /* the fp32 boundary value itself (not bf16) */
            snprintf(what, sizeof what, "s_t boundary %d (amax %a)", k, st_at[k]);
            check_tiny(lat, rope, what);
            tiny_token(r, 1.0f, rope_at[k], lat, rope);
            snprintf(what, sizeof what, "RoPE boundary %d (amax %a)", k, rope_at[k]);
            check_tiny(lat, rope, what);
        }
    }
    /* the two-level record just above the threshold keeps tiny groups exact: the reported
     * case (a value whose q is 1.5 in a group with scale byte 0x01 was stored as 6) */
    {
        const float a = f32_of((uint32_t)st_b << 16);
        const float s_t = a * INV2688;
        memset(lat, 0, sizeof lat);
        lat[0] = a;
        lat[16] = 6 * 0x1p-9f * s_t;   /* group 1: scale byte 0x01 */
        lat[17] = 1.5f * 0x1p-9f * s_t; /* q = 1.5 */
        for (int j = 0; j < 64; j++) rope[j] = 1.0f;
        uint8_t got[368];
        float y[512], yr[64];
        CHECK_OK(mlakv_encode_record(MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, lat, rope, got, NULL));
        CHECK_OK(mlakv_decode_record(MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE, got, y, yr));
        CHECKF(got[256 + 1] == 0x01, "group 1 scale byte %02x", got[257]);
        CHECKF(((got[8] >> 4) & 7) == 3, "q = 1.5 stored as code %d", (got[8] >> 4) & 7);
        CHECKF(y[17] == lat[17] && y[16] == lat[16], "tiny group decodes to %a %a, want %a %a",
               y[16], y[17], lat[16], lat[17]);
    }
    /* a sweep of magnitudes from the bf16 subnormals up: nothing decodes to NaN or Inf */
    for (int e = -133; e <= -90; e++) {
        for (int q = 0; q < 4; q++) {
            const float a = to_dtype(ldexpf(1.0f + q / 4.0f, e), MLAKV_BF16);
            tiny_token(r, a, a, lat, rope);
            snprintf(what, sizeof what, "sweep amax %a", a);
            check_tiny(lat, rope, what);
        }
    }
    /* the same tokens through the writer (bf16 input rows) give the same bytes */
    uint16_t kv[512], kp[64];
    tiny_token(r, st_at[0], rope_at[0], lat, rope);
    for (int i = 0; i < 512; i++) kv[i] = mlakv_f32_to_bf16(lat[i]);
    for (int j = 0; j < 64; j++) kp[j] = mlakv_f32_to_bf16(rope[j]);
    for (int f = MLAKV_NVFP4_FP8_ROPE; f <= MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE; f++) {
        uint8_t mem[368], want[368];
        mlakv_cache c;
        CHECK_OK(mlakv_cache_init(&c, mem, (mlakv_format)f, 1, 1, 0));
        const int64_t slot = 0;
        CHECK_OK(mlakv_write(&c, 1, kv, 512, kp, 64, MLAKV_BF16, &slot, NULL));
        CHECK_OK(mlakv_encode_record((mlakv_format)f, lat, rope, want, NULL));
        CHECK(memcmp(mem, want, 368) == 0);
    }
}

/* The bf16 RoPE field is a raw copy of bf16 input: signalling NaNs are not quieted. */
static void test_raw_bf16_rope(void) {
    const uint16_t pats[6] = {0x7F81, 0xFF81, 0x7FBF, 0x7FC1, 0x7F80, 0x0001};
    uint16_t kv[512] = {0}, kp[64];
    for (int j = 0; j < 64; j++) kp[j] = pats[j % 6];
    for (int f = MLAKV_FP8_DS_MLA; f <= MLAKV_NVFP4_DS_MLA; f++) {
        const size_t rb = rec_bytes[f], at = f == MLAKV_FP8_DS_MLA ? 528 : 304;
        uint8_t mem[656];
        mlakv_cache c;
        CHECK_OK(mlakv_cache_init(&c, mem, (mlakv_format)f, 1, 1, 0));
        const int64_t slot = 0;
        CHECK_OK(mlakv_write(&c, 1, kv, 512, kp, 64, MLAKV_BF16, &slot, NULL));
        CHECKF(memcmp(mem + at, kp, 128) == 0, "%s: bf16 RoPE not copied bit for bit",
               fmt_names[f]);
        /* fp16 input: an fp16 NaN whose payload fits bf16 is copied too, others are quieted */
        uint16_t h[64];
        for (int j = 0; j < 64; j++) h[j] = j & 1 ? 0x7C08 /* -> bf16 0x7F81 */ : 0x7C01;
        CHECK_OK(mlakv_write(&c, 1, kv, 512, h, 64, MLAKV_F16, &slot, NULL));
        uint16_t got[64];
        memcpy(got, mem + at, 128);
        int ok = 1;
        for (int j = 0; j < 64; j++) ok &= got[j] == (j & 1 ? 0x7F81 : 0x7FC0);
        CHECKF(ok, "%s: fp16 NaN RoPE stored as %04x %04x", fmt_names[f], got[0], got[1]);
        (void)rb;
    }
    /* mlakv_encode_record from fp32 values with a signalling bf16 pattern */
    float lat[512] = {0}, rope[64];
    for (int j = 0; j < 64; j++) rope[j] = f32_of((uint32_t)pats[j % 6] << 16);
    uint8_t rec[432];
    CHECK_OK(mlakv_encode_record(MLAKV_NVFP4_DS_MLA, lat, rope, rec, NULL));
    CHECK(memcmp(rec + 304, kp, 128) == 0);
}

/* ---- 5-8. the paged cache: guard bytes, geometry, dtypes, strides, out-of-range slots ------ */

static void *make_rows(tu_rng *r, mlakv_dtype dt, int64_t n, int64_t cols, int64_t stride,
                       float *exact) {
    size_t esz = mlakv_dtype_bytes(dt);
    uint8_t *p = malloc((size_t)(n * stride) * esz + 1);
    for (int64_t i = 0; i < n; i++) {
        for (int64_t c = 0; c < stride; c++) {
            float v = NAN; /* gaps between rows hold NaN: never read */
            if (c < cols) v = exact[i * cols + c];
            uint8_t *dst = p + (size_t)(i * stride + c) * esz;
            if (dt == MLAKV_F32) memcpy(dst, &v, 4);
            else {
                uint16_t h = dt == MLAKV_BF16 ? mlakv_f32_to_bf16(v) : mlakv_f32_to_f16(v);
                memcpy(dst, &h, 2);
            }
        }
    }
    (void)r;
    return p;
}

static void test_cache(tu_rng *r, mlakv_format fmt, int64_t bs, int64_t nblocks, int64_t pad,
                       mlakv_dtype dt, int64_t row_pad, int pow2) {
    const size_t rb = rec_bytes[fmt];
    const int64_t stride = bs * (int64_t)rb + pad, cap = bs * nblocks;
    size_t bytes = 0;
    CHECK_OK(mlakv_cache_bytes(fmt, nblocks, bs, pad ? stride : 0, &bytes));
    CHECK(bytes == (size_t)(nblocks * stride));
    uint8_t *mem = malloc(bytes), *want = malloc(bytes), *snap = malloc(bytes);
    uint8_t guard = (uint8_t)tu_range(r, 1, 256);
    memset(mem, guard, bytes);
    memset(want, guard, bytes);
    mlakv_cache cache;
    CHECK_OK(mlakv_cache_init(&cache, mem, fmt, nblocks, bs, pad ? stride : 0));
    CHECK(mlakv_cache_capacity(&cache) == cap);

    /* tokens: a random subset of distinct slots plus padded tokens */
    int64_t n_real = tu_range(r, 1, cap + 1), n_pad = tu_range(r, 0, 6), n = n_real + n_pad;
    int64_t *perm = malloc((size_t)cap * sizeof *perm), *slots = malloc((size_t)n * sizeof *slots);
    for (int64_t i = 0; i < cap; i++) perm[i] = i;
    for (int64_t i = cap - 1; i > 0; i--) {
        int64_t j = tu_range(r, 0, i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    const int64_t negs[4] = {-1, -2, -1000, INT64_MIN};
    for (int64_t i = 0; i < n; i++) slots[i] = -1;
    for (int64_t k = 0; k < n_real; k++) {
        int64_t pos;
        do pos = tu_range(r, 0, n);
        while (slots[pos] != -1);
        slots[pos] = perm[k];
    }
    for (int64_t i = 0; i < n; i++)
        if (slots[i] == -1) slots[i] = negs[tu_range(r, 0, 4)];

    float *lat = malloc((size_t)n * 512 * sizeof(float)), *rope = malloc((size_t)n * 64 * sizeof(float));
    for (int64_t i = 0; i < n; i++) gen_token(r, dt, lat + 512 * i, rope + 64 * i);
    int64_t kv_stride = 512 + row_pad, pe_stride = 64 + row_pad / 2 + (row_pad ? 3 : 0);
    void *kv = make_rows(r, dt, n, 512, kv_stride, lat), *pe = make_rows(r, dt, n, 64, pe_stride, rope);
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0) continue;
        int64_t off = (slots[i] / bs) * stride + (slots[i] % bs) * (int64_t)rb;
        uint8_t rec[656];
        ref_encode(fmt, lat + 512 * i, rope + 64 * i, pow2, rec);
        memcpy(want + off, rec, rb);
    }
    mlakv_write_options o = {pow2 ? MLAKV_FP8_SCALE_POW2 : MLAKV_FP8_SCALE_VLLM,
                                 MLAKV_NVFP4_ENCODER_STANDARD};

    /* out-of-range slots first: rejected, nothing written (64-bit values, incl. ones that
     * alias a valid slot when truncated to 32 bits) */
    const int64_t bad_slots[6] = {cap, cap + 1, INT64_MAX, ((int64_t)1 << 32) + 0,
                                  ((int64_t)1 << 32) + cap - 1, (int64_t)1 << 62};
    int64_t saved = slots[n - 1];
    slots[n - 1] = bad_slots[tu_range(r, 0, 6)];
    memcpy(snap, mem, bytes);
    CHECK_STATUS(mlakv_write(&cache, n, kv, kv_stride, pe, pe_stride, dt, slots, &o),
                 MLAKV_ERR_SLOT_OUT_OF_RANGE);
    CHECKF(memcmp(snap, mem, bytes) == 0, "rejected write (slot %lld, capacity %lld) changed the cache",
           (long long)slots[n - 1], (long long)cap);
    slots[n - 1] = saved;

    CHECK_OK(mlakv_write(&cache, n, kv, kv_stride, pe, pe_stride, dt, slots, &o));
    size_t first = bytes;
    for (size_t i = 0; i < bytes; i++)
        if (mem[i] != want[i]) {
            first = i;
            break;
        }
    if (!CHECKF(first == bytes,
                "%s bs %lld blocks %lld pad %lld dtype %d: byte %zu (block %zu, +%zu) got %02x "
                "want %02x (guard %02x)",
                fmt_names[fmt], (long long)bs, (long long)nblocks, (long long)pad, (int)dt, first,
                first / (size_t)stride, first % (size_t)stride, mem[first < bytes ? first : 0],
                want[first < bytes ? first : 0], guard))
        goto out;

    /* deterministic: the same call again gives the same bytes */
    memcpy(snap, mem, bytes);
    CHECK_OK(mlakv_write(&cache, n, kv, kv_stride, pe, pe_stride, dt, slots, &o));
    CHECK(memcmp(snap, mem, bytes) == 0);

    /* read back the written slots (poisoned outputs) against the reference decode */
    {
        int64_t *rs = malloc((size_t)n_real * sizeof *rs), m = 0;
        for (int64_t i = 0; i < n; i++)
            if (slots[i] >= 0) rs[m++] = slots[i];
        float *yl = malloc((size_t)m * 512 * sizeof(float)), *yr = malloc((size_t)m * 64 * sizeof(float));
        memset(yl, 0xFF, (size_t)m * 512 * sizeof(float));
        memset(yr, 0xFF, (size_t)m * 64 * sizeof(float));
        CHECK_OK(mlakv_read(&cache, m, rs, yl, yr));
        int same = 1;
        for (int64_t k = 0; k < m && same; k++) {
            float rl[512], rr[64];
            int64_t off = (rs[k] / bs) * stride + (rs[k] % bs) * (int64_t)rb;
            ref_decode(fmt, want + off, rl, rr);
            for (int i = 0; i < 512; i++) same &= same_f32(yl[512 * k + i], rl[i]);
            for (int j = 0; j < 64; j++) same &= same_f32(yr[64 * k + j], rr[j]);
        }
        CHECKF(same, "%s: mlakv_read differs from the reference decode", fmt_names[fmt]);
        free(rs), free(yl), free(yr);
    }
out:
    free(mem), free(want), free(snap), free(perm), free(slots), free(lat), free(rope), free(kv),
        free(pe);
}

int main(void) {
    tu_rng r;
    tu_rng_init(&r, tu_seed("test_writer"));
    init_tables();
    /* the reference codecs themselves: a few anchor values from FORMATS.md */
    CHECK(ref_e4m3(448.0f) == 0x7E && ref_e4m3(1e9f) == 0x7E && ref_e4m3(-INFINITY) == 0xFE);
    CHECK(ref_e4m3(NAN) == 0x7F && ref_e4m3(0x1p-9f) == 0x01 && ref_e4m3(0x1p-10f) == 0x00);
    CHECK(ref_e2m1(0.25f) == 0 && ref_e2m1(0.75f) == 2 && ref_e2m1(1.25f) == 2 && ref_e2m1(1.75f) == 4);
    CHECK(ref_e2m1(2.5f) == 4 && ref_e2m1(3.5f) == 6 && ref_e2m1(5.0f) == 6 && ref_e2m1(-7.0f) == 15);
    CHECK(ref_e2m1(-0.1f) == 8 && ref_e2m1(NAN) == 0);

    test_hand_built(&r);
    test_recipes(&r, 3000);
    test_zero_tokens();
    test_specials(&r);
    test_tiny_tokens(&r);
    test_raw_bf16_rope();

    const int64_t block_sizes[4] = {1, 16, 61, 64};
    const mlakv_dtype dts[3] = {MLAKV_F32, MLAKV_BF16, MLAKV_F16};
    for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
        for (int b = 0; b < 4; b++) {
            for (int trial = 0; trial < 6; trial++) {
                int64_t pad = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? 7 : tu_range(&r, 1, 700));
                int64_t nblocks = tu_range(&r, 1, block_sizes[b] == 1 ? 40 : 5);
                int64_t row_pad = trial & 1 ? tu_range(&r, 1, 40) : 0;
                test_cache(&r, (mlakv_format)f, block_sizes[b], nblocks, pad, dts[trial % 3],
                           row_pad, f == 0 && trial >= 3);
            }
        }
    }
    return tu_finish();
}
