/* Shared helpers of the libFuzzer harnesses: a reader that turns the fuzzer's bytes into
 * choices, buffer snapshots, and FUZZ_ASSERT, which aborts (a finding) when a property of the
 * library does not hold. Harnesses are built with -fsanitize=fuzzer,address,undefined
 * (CMake option MLAKV_FUZZ); see tests/fuzz/README.md. */
#ifndef MLAKV_FUZZ_COMMON_H
#define MLAKV_FUZZ_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlakv.h"

/* A violated property: print where and why, then abort so libFuzzer saves the input. */
#define FUZZ_ASSERT(cond, ...)                                                             \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "\n%s:%d: property violated: %s\n  ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n  last error: %s\n", mlakv_last_error());                   \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* ---- input reader: every read succeeds; past the end it yields zeros ------------------- */

typedef struct {
    const uint8_t *p;
    size_t n, at;
} fz_in;

static inline fz_in fz_make(const uint8_t *data, size_t size) {
    fz_in in = {data, size, 0};
    return in;
}

static inline uint8_t fz_u8(fz_in *in) { return in->at < in->n ? in->p[in->at++] : 0; }

static inline void fz_bytes(fz_in *in, void *dst, size_t len) {
    uint8_t *d = (uint8_t *)dst;
    for (size_t i = 0; i < len; i++) d[i] = fz_u8(in);
}

static inline uint16_t fz_u16(fz_in *in) {
    uint16_t v;
    fz_bytes(in, &v, 2);
    return v;
}

static inline uint32_t fz_u32(fz_in *in) {
    uint32_t v;
    fz_bytes(in, &v, 4);
    return v;
}

static inline uint64_t fz_u64(fz_in *in) {
    uint64_t v;
    fz_bytes(in, &v, 8);
    return v;
}

/* An integer in [lo, hi] (hi - lo < 2^16). */
static inline int64_t fz_range(fz_in *in, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t v = span <= 256 ? fz_u8(in) : fz_u16(in);
    return lo + (int64_t)(v % span);
}

static inline size_t fz_left(const fz_in *in) { return in->at < in->n ? in->n - in->at : 0; }

/* A float: mostly "realistic" values (a small integer times a power of two, with the range
 * chosen by the input), sometimes raw bits (NaN payloads, Inf, subnormals, huge). */
static inline float fz_float(fz_in *in, int mode) {
    if (mode == 0) {
        uint32_t u = fz_u32(in);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int8_t m = (int8_t)fz_u8(in);
    int e = (int)fz_range(in, -140, 130);
    if (mode == 2) e = (int)fz_range(in, -12, 6); /* the range real activations live in */
    return ldexpf((float)m, e);
}

/* The float special values the harnesses mix in. */
static inline float fz_special(fz_in *in) {
    static const uint32_t bits[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu,
                                    0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,
                                    0x00000001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u,
                                    0x0D000000u, 0x06000000u, 0x3F800000u, 0xC3E00000u};
    uint32_t u = bits[fz_u8(in) % (sizeof bits / sizeof bits[0])];
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- snapshots ------------------------------------------------------------------------ */

static inline void *fz_dup(const void *p, size_t n) {
    void *d = malloc(n ? n : 1);
    if (!d) abort();
    if (n) memcpy(d, p, n);
    return d;
}

/* Index of the first differing byte, or -1. */
static inline long fz_diff(const void *a, const void *b, size_t n) {
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return (long)i;
    return -1;
}

static inline uint32_t fz_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Same value: both NaN (any payload), or equal with the same sign of zero. */
static inline int fz_same_value(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

/* Host value of element i of a dtype tensor (exact). */
static inline float fz_load(const void *base, mlakv_dtype dtype, int64_t i) {
    if (dtype == MLAKV_F32) return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return dtype == MLAKV_BF16 ? mlakv_bf16_to_f32(h) : mlakv_f16_to_f32(h);
}

/* ---- bulk values: a small generator seeded by the input keeps inputs short ------------- */

static inline uint64_t fz_mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Fill n floats: one "row recipe" from the input (mode, exponent, seed, a few special values
 * at chosen positions). Modes: raw bits (1/8); int8 x 2^e with e anywhere in fp32's range
 * (1/8); int8 x 2^e in the range of real activations (5/8); all zero but the specials (1/8). */
static inline void fz_fill_floats(fz_in *in, float *x, int64_t n) {
    int mode = fz_u8(in) % 8;
    mode = mode >= 2 && mode <= 6 ? 2 : mode == 7 ? 3 : mode;
    int e = mode == 2 ? (int)fz_range(in, -14, 2) : (int)fz_range(in, -150, 127);
    int spread = (int)fz_range(in, 0, 12);
    uint64_t s = fz_u32(in);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = fz_mix(&s);
        if (mode == 0) {
            uint32_t u = (uint32_t)r;
            memcpy(&x[i], &u, 4);
        } else if (mode == 3) {
            x[i] = 0.0f;
        } else {
            int ee = e - (spread ? (int)((r >> 8) % (uint64_t)(spread + 1)) : 0);
            x[i] = ldexpf((float)(int8_t)(r & 0xFF), ee);
        }
    }
    int specials = fz_u8(in) % 4;
    for (int k = 0; k < specials && n > 0; k++) {
        int64_t at = (int64_t)(fz_u16(in) % (uint64_t)n);
        x[at] = fz_special(in);
    }
}

/* ---- a cache to fuzz against ----------------------------------------------------------- */

/* A host cache with a small geometry chosen by the input (1..max_blocks blocks of
 * 1..max_block_size records, sometimes padded between blocks), its bytes poisoned with a
 * pattern; or, when valid = 0, a descriptor the library must reject (unknown format, zero or
 * negative sizes, a too small or zero stride, an overflowing size, a NULL base) over a small
 * dummy buffer. bytes is what buf holds. */
typedef struct {
    mlakv_cache c;
    uint8_t *buf;
    size_t bytes;
    int valid;
    int64_t capacity; /* 0 when !valid */
    int64_t record_bytes;
} fz_cache;

static inline void fz_poison(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed ^ (uint8_t)(i * 131u + (i >> 8)));
}

static inline void fz_cache_make(fz_in *in, fz_cache *fc, int max_blocks, int max_block_size) {
    memset(fc, 0, sizeof *fc);
    uint8_t sel = fz_u8(in);
    mlakv_format format = (mlakv_format)(sel % MLAKV_FORMAT_COUNT);
    int64_t nb = fz_range(in, 1, max_blocks), bs = fz_range(in, 1, max_block_size);
    int64_t rec = (int64_t)mlakv_record_bytes(format);
    int64_t pad = (sel >> 2) % 4 == 0 ? fz_range(in, 0, 200) : 0;
    int64_t stride = bs * rec + pad;
    uint8_t poison = fz_u8(in);
    int bad = (sel >> 4) % 16 == 0 ? 1 + (int)(fz_u8(in) % 8) : 0;
    if (!bad) {
        size_t bytes = 0;
        if (mlakv_cache_bytes(format, nb, bs, stride, &bytes) != MLAKV_OK) abort();
        fc->buf = (uint8_t *)malloc(bytes);
        if (!fc->buf) abort();
        fz_poison(fc->buf, bytes, poison);
        fc->bytes = bytes;
        if (mlakv_cache_init(&fc->c, fc->buf, format, nb, bs, stride) != MLAKV_OK) abort();
        fc->valid = 1;
        fc->capacity = nb * bs;
        fc->record_bytes = rec;
        return;
    }
    fc->bytes = 4096;
    fc->buf = (uint8_t *)malloc(fc->bytes);
    if (!fc->buf) abort();
    fz_poison(fc->buf, fc->bytes, poison);
    fc->c.base = fc->buf;
    fc->c.format = format;
    fc->c.num_blocks = nb;
    fc->c.block_size = bs;
    fc->c.block_stride_bytes = stride;
    fc->c.latent_scale = 1.0f;
    switch (bad) {
    case 1: fc->c.format = (mlakv_format)(fz_u8(in) & 1 ? MLAKV_FORMAT_COUNT : -1); break;
    case 2: fc->c.num_blocks = -(int64_t)fz_range(in, 0, 3); break;
    case 3: fc->c.block_size = -(int64_t)fz_range(in, 0, 3); break;
    case 4: fc->c.block_stride_bytes = bs * rec - fz_range(in, 1, 700); break;
    case 5: fc->c.block_stride_bytes = 0; break;
    case 6: fc->c.num_blocks = INT64_MAX / stride + 1 + fz_range(in, 0, 9); break;
    case 7: fc->c.block_size = INT64_MAX / rec + 1; fc->c.block_stride_bytes = INT64_MAX; break;
    default: fc->c.base = NULL; break;
    }
    fc->record_bytes = rec;
}

static inline void fz_cache_free(fz_cache *fc) { free(fc->buf); }

/* Byte offset of a slot in a valid cache. */
static inline size_t fz_slot_offset(const fz_cache *fc, int64_t slot) {
    return (size_t)(slot / fc->c.block_size) * (size_t)fc->c.block_stride_bytes +
           (size_t)(slot % fc->c.block_size) * (size_t)fc->record_bytes;
}

/* A slot for a writer or reader: mostly valid, else padded (-1), other negatives, the
 * capacity and just beyond, INT64_MAX, a valid slot + 2^32 (aliases a valid one if truncated
 * to 32 bits), or raw 64 bits. cap may be 0 (invalid cache). */
static inline int64_t fz_slot(fz_in *in, int64_t cap) {
    uint8_t k = fz_u8(in) % 16;
    int64_t v = cap > 0 ? (int64_t)(fz_u16(in) % (uint64_t)cap) : 0;
    switch (k) {
    case 9: return -1;
    case 10: return fz_u8(in) & 1 ? INT64_MIN : -(int64_t)fz_range(in, 2, 1000);
    case 11: return cap;
    case 12: return cap + fz_range(in, 1, 64);
    case 13: return INT64_MAX;
    case 14: return v + ((int64_t)1 << 32);
    case 15: return (int64_t)fz_u64(in);
    default: return v;
    }
}

#endif
