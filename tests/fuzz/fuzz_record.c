/* Fuzz record decoding: arbitrary bytes as one record of each format.
 *
 * Properties:
 *  - mlakv_decode_record gives, element by element, the value docs/FORMAT.md defines, computed
 *    here from the bit layouts with decoders written from the E4M3 / E2M1 / bf16 definitions
 *    (same value: both NaN, or equal with the same sign of zero);
 *  - asking for only the latent or only the RoPE gives the same bits as asking for both;
 *  - the padding bytes of a record are never read (changing them changes no value);
 *  - mlakv_read of that record stored at a fuzzed slot of a cache (any geometry, padded block
 *    stride) returns exactly the bits of mlakv_decode_record, NaN payloads included;
 *  - no output element past 512 / 64 is written; an unknown format or a NULL record fails and
 *    writes nothing.
 */
#include "fuzz_common.h"

/* E4M3 (OCP e4m3fn) from its bits: s.eeee.mmm, bias 7, no Inf, 0x7F/0xFF NaN. */
static float ref_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return s ? -v : v;
}

/* E2M1 nibble: bit 3 sign, magnitude code {0, 0.5, 1, 1.5, 2, 3, 4, 6}. */
static float ref_e2m1(uint8_t n) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[n & 7];
    return (n & 8) ? -v : v;
}

static float ref_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ref_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* The FORMAT.md value of every element of a record. */
static void reference(mlakv_format f, const uint8_t *r, float *lat, float *rope) {
    if (f == MLAKV_FP8_DS_MLA) {
        for (int i = 0; i < 512; i++) lat[i] = ref_e4m3(r[i]) * ref_f32(r + 512 + 4 * (i / 128));
        for (int j = 0; j < 64; j++) rope[j] = ref_bf16(r + 528 + 2 * j);
        return;
    }
    for (int d = 0; d < 512; d++) {
        uint8_t nib = (uint8_t)((r[d / 2] >> ((d & 1) ? 4 : 0)) & 0xF);
        lat[d] = ref_e2m1(nib) * ref_e4m3(r[256 + d / 16]);
        if (f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) lat[d] = lat[d] * ref_f32(r + 292);
    }
    if (f == MLAKV_NVFP4_DS_MLA) {
        for (int j = 0; j < 64; j++) rope[j] = ref_bf16(r + 304 + 2 * j);
    } else {
        for (int j = 0; j < 64; j++) rope[j] = ref_e4m3(r[304 + j]) * ref_f32(r + 288);
    }
}

/* [lo, hi) padding of each format (never read). */
static void padding(mlakv_format f, int *lo, int *hi) {
    *lo = *hi = 0;
    if (f == MLAKV_NVFP4_DS_MLA) *lo = 288, *hi = 304;
    if (f == MLAKV_NVFP4_FP8_ROPE) *lo = 292, *hi = 304;
    if (f == MLAKV_NVFP4_FP8_ROPE_TOKEN_SCALE) *lo = 296, *hi = 304;
}

#define CANARY 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = fz_make(data, size);
    fz_cache fc;
    fz_cache_make(&in, &fc, 3, 5);
    if (!fc.valid) { /* this harness is about records: make a valid cache of that format */
        mlakv_format f = (mlakv_format)((unsigned)fc.c.format % MLAKV_FORMAT_COUNT);
        fz_cache_free(&fc);
        size_t bytes;
        if (mlakv_cache_bytes(f, 2, 3, 0, &bytes) != MLAKV_OK) abort();
        fc.buf = (uint8_t *)malloc(bytes);
        if (!fc.buf) abort();
        fz_poison(fc.buf, bytes, 0x42);
        fc.bytes = bytes;
        if (mlakv_cache_init(&fc.c, fc.buf, f, 2, 3, 0) != MLAKV_OK) abort();
        fc.valid = 1, fc.capacity = 6, fc.record_bytes = (int64_t)mlakv_record_bytes(f);
    }
    const mlakv_format f = fc.c.format;
    const size_t rb = (size_t)fc.record_bytes;

    /* the record: the input's bytes, the rest from a generator seeded by the input */
    uint8_t *rec = (uint8_t *)malloc(rb);
    if (!rec) abort();
    uint64_t s = fz_u32(&in);
    for (size_t i = 0; i < rb; i++) rec[i] = (uint8_t)fz_mix(&s);
    size_t take = fz_left(&in) < rb ? fz_left(&in) : rb;
    size_t at = take < rb ? (size_t)fz_u16(&in) % (rb - take + 1) : 0;
    fz_bytes(&in, rec + at, take);
    uint8_t *rec0 = fz_dup(rec, rb);

    float lat[512 + CANARY], rope[64 + CANARY], wl[512], wr[64];
    fz_poison((uint8_t *)lat, sizeof lat, 0x11);
    fz_poison((uint8_t *)rope, sizeof rope, 0x22);
    float *lat0 = (float *)fz_dup(lat, sizeof lat), *rope0 = (float *)fz_dup(rope, sizeof rope);

    /* failures write nothing */
    mlakv_format bad = (mlakv_format)(fz_u8(&in) & 1 ? MLAKV_FORMAT_COUNT : -1);
    FUZZ_ASSERT(mlakv_decode_record(bad, rec, lat, rope) == MLAKV_ERR_UNKNOWN_FORMAT,
                "unknown format %d accepted", (int)bad);
    FUZZ_ASSERT(mlakv_decode_record(f, NULL, lat, rope) != MLAKV_OK, "NULL record accepted");
    FUZZ_ASSERT(fz_diff(lat0, lat, sizeof lat) < 0 && fz_diff(rope0, rope, sizeof rope) < 0,
                "a failed decode_record wrote its outputs");

    FUZZ_ASSERT(mlakv_decode_record(f, rec, lat, rope) == MLAKV_OK, "decode_record failed");
    FUZZ_ASSERT(fz_diff(rec0, rec, rb) < 0, "decode_record changed the record");
    FUZZ_ASSERT(fz_diff(lat0 + 512, lat + 512, CANARY * 4) < 0 &&
                fz_diff(rope0 + 64, rope + 64, CANARY * 4) < 0, "decode_record wrote past 512/64");

    reference(f, rec, wl, wr);
    for (int d = 0; d < 512; d++)
        FUZZ_ASSERT(fz_same_value(lat[d], wl[d]), "format %d latent[%d] = %g (%08x), FORMAT.md "
                    "gives %g (%08x)", (int)f, d, lat[d], fz_bits(lat[d]), wl[d], fz_bits(wl[d]));
    for (int j = 0; j < 64; j++)
        FUZZ_ASSERT(fz_same_value(rope[j], wr[j]), "format %d rope[%d] = %g (%08x), FORMAT.md "
                    "gives %g (%08x)", (int)f, j, rope[j], fz_bits(rope[j]), wr[j], fz_bits(wr[j]));

    /* one output at a time */
    float l2[512], r2[64];
    FUZZ_ASSERT(mlakv_decode_record(f, rec, l2, NULL) == MLAKV_OK, "latent-only decode failed");
    FUZZ_ASSERT(memcmp(l2, lat, sizeof l2) == 0, "latent-only decode differs");
    FUZZ_ASSERT(mlakv_decode_record(f, rec, NULL, r2) == MLAKV_OK, "rope-only decode failed");
    FUZZ_ASSERT(memcmp(r2, rope, sizeof r2) == 0, "rope-only decode differs");
    FUZZ_ASSERT(mlakv_decode_record(f, rec, NULL, NULL) == MLAKV_OK, "decode with no output");

    /* padding is not read */
    int plo, phi;
    padding(f, &plo, &phi);
    if (phi > plo) {
        uint8_t *rp = fz_dup(rec, rb);
        for (int i = plo; i < phi; i++) rp[i] = (uint8_t)(fz_u8(&in) ^ 0xFF);
        FUZZ_ASSERT(mlakv_decode_record(f, rp, l2, r2) == MLAKV_OK, "decode failed");
        FUZZ_ASSERT(memcmp(l2, lat, sizeof l2) == 0 && memcmp(r2, rope, sizeof r2) == 0,
                    "format %d: the padding bytes [%d, %d) change decoded values", (int)f, plo, phi);
        free(rp);
    }

    /* the same bytes read back through a cache */
    int64_t slot = (int64_t)(fz_u16(&in) % (uint64_t)fc.capacity);
    memcpy(fc.buf + fz_slot_offset(&fc, slot), rec, rb);
    uint8_t *cache0 = fz_dup(fc.buf, fc.bytes);
    float cl[512 + CANARY], cr[64 + CANARY];
    fz_poison((uint8_t *)cl, sizeof cl, 0x33);
    fz_poison((uint8_t *)cr, sizeof cr, 0x44);
    float *cl0 = (float *)fz_dup(cl, sizeof cl), *cr0 = (float *)fz_dup(cr, sizeof cr);
    mlakv_status st = mlakv_read(&fc.c, 1, &slot, cl, cr);
    FUZZ_ASSERT(st == MLAKV_OK, "read of slot %lld failed: %s", (long long)slot, mlakv_status_name(st));
    FUZZ_ASSERT(memcmp(cl, lat, 512 * 4) == 0, "format %d: read latent differs from decode_record",
                (int)f);
    FUZZ_ASSERT(memcmp(cr, rope, 64 * 4) == 0, "format %d: read rope differs from decode_record",
                (int)f);
    FUZZ_ASSERT(fz_diff(cl0 + 512, cl + 512, CANARY * 4) < 0 &&
                fz_diff(cr0 + 64, cr + 64, CANARY * 4) < 0, "read wrote past one row");
    FUZZ_ASSERT(fz_diff(cache0, fc.buf, fc.bytes) < 0, "read changed the cache");

    free(cache0), free(cl0), free(cr0), free(lat0), free(rope0), free(rec0), free(rec);
    fz_cache_free(&fc);
    return 0;
}
