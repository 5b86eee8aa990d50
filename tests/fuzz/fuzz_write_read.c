/* Fuzz mlakv_write then mlakv_read over one small cache.
 *
 * Inputs: geometry and format (sometimes a descriptor that must be rejected), dtype (F32, BF16,
 * F16 or unknown), row strides (sometimes too small, huge or misaligned pointers), write
 * options (NULL, either recipe, unknown), slots (valid, padded, negative, capacity and beyond,
 * INT64_MAX, 2^32 aliases, raw 64-bit) and token values (raw bits with NaN/Inf, any exponent,
 * realistic).
 *
 * Properties:
 *  - the call succeeds exactly when the documented preconditions hold;
 *  - a failed call changes no byte of the cache; no call changes its inputs;
 *  - a successful write leaves every record at a written slot equal to mlakv_encode_record of
 *    the last token written there (its values widened to fp32) and every other byte of the
 *    cache (unwritten records, padding between blocks) as it was;
 *  - finite tokens whose latent and RoPE maxima lie in [2^-100, 2^100] (or are 0) decode to
 *    finite values (below 2^-100 see MLAKV_FUZZ_TINY_TOKENS);
 *  - a read succeeds exactly when every slot is in [0, capacity); it then returns, bit for bit
 *    (NaN payloads included), mlakv_decode_record of each slot's record, writes nothing past
 *    its n rows, and a failed read writes nothing.
 *
 * MLAKV_FUZZ_ALIASING (off by default): also place slot_mapping inside the cache and the read
 * slots inside the latent output. Then a call must either fail changing nothing or give the
 * result the entry-time values imply.
 * MLAKV_FUZZ_TINY_TOKENS (off by default): the finite-decode property for every finite token
 * (the guard for tiny tokens in FORMATS.md).
 */
#include "fuzz_common.h"

#ifndef MLAKV_FUZZ_ALIASING
#define MLAKV_FUZZ_ALIASING 0
#endif
#ifndef MLAKV_FUZZ_TINY_TOKENS
#define MLAKV_FUZZ_TINY_TOKENS 0
#endif

#define MAX_N 8

static float amax_finite(const float *x, int n, int *all_finite) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) *all_finite = 0;
        if (fabsf(x[i]) > m) m = fabsf(x[i]);
    }
    return m;
}

static int in_normal_range(float amax) {
    if (MLAKV_FUZZ_TINY_TOKENS) return amax <= 0x1p100f;
    return amax == 0.0f || (amax >= 0x1p-100f && amax <= 0x1p100f);
}

/* The element-size-misaligned pointer mode of a row buffer. */
typedef struct {
    void *mem;  /* allocation */
    void *ptr;  /* what is passed */
    size_t bytes;
} rows_buf;

/* Predicted outcome of the row checks of mlakv_write. */
static int rows_ok(int64_t n, int64_t cols, int64_t stride, size_t esz, int misaligned) {
    if (n == 0) return 1;
    if (stride < cols) return 0;
    if (n - 1 > (INT64_MAX - cols) / stride) return 0;
    uint64_t elems = (uint64_t)((n - 1) * stride + cols);
    if (elems > (uint64_t)INT64_MAX / esz) return 0;
    return !misaligned;
}

static int64_t pick_stride(fz_in *in, int64_t cols) {
    switch (fz_u8(in) % 12) {
    case 0: return cols - fz_range(in, 1, 3);
    case 1: return 0;
    case 2: return -fz_range(in, 1, 3);
    case 3: return INT64_MAX - fz_range(in, 0, 3);
    case 4: return INT64_MAX / 2 + fz_range(in, 0, 3);
    case 5: case 6: return cols + fz_range(in, 1, 40);
    default: return cols;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = fz_make(data, size);
    fz_cache fc;
    fz_cache_make(&in, &fc, 4, 9);
    const mlakv_format format = fc.c.format;
    const size_t rec = fc.valid ? (size_t)fc.record_bytes : 0;

    /* ---- write ---- */
    uint8_t dsel = fz_u8(&in);
    mlakv_dtype dtype = (mlakv_dtype)(dsel % 4 == 3 ? (dsel & 4 ? -1 : MLAKV_DTYPE_COUNT) : dsel % 4);
    size_t esz = mlakv_dtype_bytes(dtype);
    int64_t n = fz_range(&in, -1, MAX_N);
    if (n == -1 && fz_u8(&in) & 1) n = INT64_MIN;
    int64_t kv_stride = pick_stride(&in, MLAKV_LATENT_DIM);
    int64_t pe_stride = pick_stride(&in, MLAKV_ROPE_DIM);
    uint8_t msel = fz_u8(&in);
    int kv_mis = esz && msel % 16 == 1, pe_mis = esz && msel % 16 == 2;
    uint8_t osel = fz_u8(&in) % 8;
    mlakv_write_options opt = mlakv_write_options_default(), *optp = &opt;
    int opt_ok = 1;
    if (osel == 0) optp = NULL;
    else if (osel <= 3) opt.fp8_scale_recipe = MLAKV_FP8_SCALE_POW2;
    else if (osel == 4) {
        opt.fp8_scale_recipe = (mlakv_fp8_scale_recipe)(fz_u8(&in) & 1 ? 2 : -1);
        opt_ok = 0;
    }
    int slots_null = fz_u8(&in) % 32 == 0;

    /* the row buffers: real rows when the checks can pass, else a small dummy */
    int64_t nn = n > 0 ? n : 0;
    float lat[MAX_N][MLAKV_LATENT_DIM], rope[MAX_N][MLAKV_ROPE_DIM];
    int64_t slots[MAX_N + 1];
    for (int64_t i = 0; i < nn; i++) {
        fz_fill_floats(&in, lat[i], MLAKV_LATENT_DIM);
        fz_fill_floats(&in, rope[i], MLAKV_ROPE_DIM);
        slots[i] = fz_slot(&in, fc.capacity);
    }
    int raw16 = fz_u8(&in) & 1; /* bf16/f16: use the float's top/bottom bits directly */
    rows_buf kv = {0}, pe = {0};
    rows_buf *bufs[2] = {&kv, &pe};
    const int64_t cols[2] = {MLAKV_LATENT_DIM, MLAKV_ROPE_DIM};
    const int64_t strides[2] = {kv_stride, pe_stride};
    const int mis[2] = {kv_mis, pe_mis};
    for (int b = 0; b < 2; b++) {
        rows_buf *rb = bufs[b];
        size_t elems = 64;
        int real = esz && nn > 0 && rows_ok(nn, cols[b], strides[b], esz, 0) &&
                   (uint64_t)((nn - 1) * strides[b] + cols[b]) < (1u << 20);
        if (real) elems = (size_t)((nn - 1) * strides[b] + cols[b]);
        size_t e = esz ? esz : 4;
        rb->bytes = elems * e;
        rb->mem = malloc(rb->bytes + 8);
        if (!rb->mem) abort();
        fz_poison((uint8_t *)rb->mem, rb->bytes + 8, (uint8_t)(0x33 + b));
        rb->ptr = (uint8_t *)rb->mem + (mis[b] ? 1 : 0);
        if (!real && nn > 0 && esz && rows_ok(nn, cols[b], strides[b], esz, 0)) {
            /* valid but too large to allocate (a huge stride with n == 1 is fine) */
            if (nn == 1) {
                free(rb->mem);
                rb->bytes = (size_t)cols[b] * esz;
                rb->mem = malloc(rb->bytes + 8);
                if (!rb->mem) abort();
                rb->ptr = (uint8_t *)rb->mem + (mis[b] ? 1 : 0);
                real = 1;
            } else {
                goto done_noread; /* cannot happen with the strides picked; be safe */
            }
        }
        if (!real) continue;
        for (int64_t i = 0; i < nn; i++) {
            const float *src = b == 0 ? lat[i] : rope[i];
            for (int64_t j = 0; j < cols[b]; j++) {
                size_t at = (size_t)(i * strides[b] + j);
                if (dtype == MLAKV_F32) {
                    memcpy((uint8_t *)rb->ptr + 4 * at, &src[j], 4);
                } else {
                    uint16_t h;
                    if (raw16) {
                        uint32_t u = fz_bits(src[j]);
                        h = (uint16_t)((j & 1) ? u : u >> 16);
                    } else {
                        h = dtype == MLAKV_BF16 ? mlakv_f32_to_bf16(src[j]) : mlakv_f32_to_f16(src[j]);
                    }
                    memcpy((uint8_t *)rb->ptr + 2 * at, &h, 2);
                }
            }
        }
    }

    int64_t *slot_ptr = slots_null ? NULL : slots;
    int alias_write = 0;
#if MLAKV_FUZZ_ALIASING
    if (fc.valid && nn > 0 && !slots_null && fz_u8(&in) % 4 == 0 &&
        fc.bytes >= (size_t)nn * sizeof(int64_t)) {
        size_t room = fc.bytes - (size_t)nn * sizeof(int64_t);
        size_t at = ((size_t)fz_u16(&in) % (room + 1)) & ~(size_t)7;
        memcpy(fc.buf + at, slots, (size_t)nn * sizeof(int64_t));
        slot_ptr = (int64_t *)(void *)(fc.buf + at);
        alias_write = 1;
    }
#endif

    /* predicted outcome */
    int want_ok = fc.valid && n >= 0 && esz != 0 && opt_ok;
    if (want_ok && n > 0) {
        want_ok = rows_ok(n, MLAKV_LATENT_DIM, kv_stride, esz, kv_mis) &&
                  rows_ok(n, MLAKV_ROPE_DIM, pe_stride, esz, pe_mis) && !slots_null;
        for (int64_t i = 0; want_ok && i < n; i++)
            if (slots[i] >= fc.capacity) want_ok = 0;
    }

    uint8_t *cache0 = fz_dup(fc.buf, fc.bytes);
    void *kv0 = fz_dup(kv.mem, kv.bytes + 8), *pe0 = fz_dup(pe.mem, pe.bytes + 8);
    mlakv_cache desc0 = fc.c;
    mlakv_write_options opt0 = opt;

    mlakv_status st = mlakv_write(&fc.c, n, kv.ptr, kv_stride, pe.ptr, pe_stride, dtype, slot_ptr,
                                  optp);

    /* an aliased call may also be rejected */
    FUZZ_ASSERT((st == MLAKV_OK) == want_ok || (alias_write && st != MLAKV_OK), "write returned %s, predicted %s (format %d n %lld "
                "dtype %d strides %lld %lld misaligned %d %d options %d)",
                mlakv_status_name(st), want_ok ? "OK" : "a failure", (int)format, (long long)n,
                (int)dtype, (long long)kv_stride, (long long)pe_stride, kv_mis, pe_mis, osel);
    FUZZ_ASSERT(memcmp(&desc0, &fc.c, sizeof desc0) == 0, "write changed the descriptor");
    FUZZ_ASSERT(fz_diff(kv0, kv.mem, kv.bytes + 8) < 0 && fz_diff(pe0, pe.mem, pe.bytes + 8) < 0,
                "write changed kv_c or k_pe");
    FUZZ_ASSERT(memcmp(&opt0, &opt, sizeof opt) == 0, "write changed the options");
    if (st != MLAKV_OK) {
        long d = fz_diff(cache0, fc.buf, fc.bytes);
        FUZZ_ASSERT(d < 0, "failed write (%s) changed cache byte %ld", mlakv_status_name(st), d);
    } else {
        /* expected cache: the entry bytes, then every token in order */
        uint8_t *want = fz_dup(cache0, fc.bytes);
        uint8_t recbuf[656];
        for (int64_t i = 0; i < n; i++) {
            if (slots[i] < 0) continue;
            float l32[MLAKV_LATENT_DIM], r32[MLAKV_ROPE_DIM];
            for (int j = 0; j < MLAKV_LATENT_DIM; j++)
                l32[j] = fz_load(kv.ptr, dtype, i * kv_stride + j);
            for (int j = 0; j < MLAKV_ROPE_DIM; j++)
                r32[j] = fz_load(pe.ptr, dtype, i * pe_stride + j);
            FUZZ_ASSERT(mlakv_encode_record(format, l32, r32, recbuf, optp) == MLAKV_OK,
                        "encode_record failed where write succeeded");
            memcpy(want + fz_slot_offset(&fc, slots[i]), recbuf, rec);

            int fin = 1;
            float la = amax_finite(l32, MLAKV_LATENT_DIM, &fin);
            float ra = amax_finite(r32, MLAKV_ROPE_DIM, &fin);
            if (fin && in_normal_range(la) && in_normal_range(ra)) {
                float dl[MLAKV_LATENT_DIM], dr[MLAKV_ROPE_DIM];
                FUZZ_ASSERT(mlakv_decode_record(format, recbuf, dl, dr) == MLAKV_OK, "decode");
                for (int j = 0; j < MLAKV_LATENT_DIM; j++)
                    FUZZ_ASSERT(isfinite(dl[j]), "format %d: finite token (latent max %g, rope "
                                "max %g) decodes to latent[%d] = %g", (int)format, la, ra, j, dl[j]);
                for (int j = 0; j < MLAKV_ROPE_DIM; j++)
                    FUZZ_ASSERT(isfinite(dr[j]), "format %d: finite token (latent max %g, rope "
                                "max %g) decodes to rope[%d] = %g", (int)format, la, ra, j, dr[j]);
            }
        }
        long d = fz_diff(want, fc.buf, fc.bytes);
        FUZZ_ASSERT(d < 0, "after a successful write (format %d, n %lld, dtype %d, alias %d) "
                    "cache byte %ld is %02x, want %02x (entry value %02x)", (int)format,
                    (long long)n, (int)dtype, alias_write, d, fc.buf[d], want[d], cache0[d]);
        free(want);
    }
    free(cache0);
    free(kv0);
    free(pe0);

    /* ---- read ---- */
    {
        int64_t m = fz_range(&in, -1, MAX_N);
        uint8_t rsel = fz_u8(&in);
        int lat_null = rsel % 8 == 1, rope_null = rsel % 8 == 2, rslots_null = rsel % 32 == 3;
        if (rsel % 8 == 4) lat_null = rope_null = 1;
        int64_t mm = m > 0 ? m : 0;
        int64_t rslots[MAX_N + 1];
        for (int64_t i = 0; i < mm; i++) {
            rslots[i] = fz_slot(&in, fc.capacity);
            if (rslots[i] == -1 && fz_u8(&in) & 1) rslots[i] = fz_range(&in, 0, 40);
        }
        /* outputs with one extra row that must stay untouched */
        size_t lb = (size_t)(mm + 1) * MLAKV_LATENT_DIM * sizeof(float);
        size_t rb = (size_t)(mm + 1) * MLAKV_ROPE_DIM * sizeof(float);
        float *lo = (float *)malloc(lb), *ro = (float *)malloc(rb);
        if (!lo || !ro) abort();
        fz_poison((uint8_t *)lo, lb, 0x5A);
        fz_poison((uint8_t *)ro, rb, 0xA5);
        const int64_t *rs = rslots_null ? NULL : rslots;
        int alias_read = 0;
#if MLAKV_FUZZ_ALIASING
        if (!lat_null && !rslots_null && mm > 0 && fz_u8(&in) % 4 == 0) {
            size_t room = lb - (size_t)mm * sizeof(int64_t);
            size_t at = ((size_t)fz_u16(&in) % (room + 1)) & ~(size_t)7;
            memcpy((uint8_t *)lo + at, rslots, (size_t)mm * sizeof(int64_t));
            rs = (const int64_t *)(const void *)((uint8_t *)lo + at);
            alias_read = 1;
        }
#endif
        int want = fc.valid && m >= 0;
        if (want && m > 0) {
            want = !rslots_null;
            for (int64_t i = 0; want && i < m; i++)
                if (rslots[i] < 0 || rslots[i] >= fc.capacity) want = 0;
        }
        uint8_t *cache1 = fz_dup(fc.buf, fc.bytes);
        float *lo0 = (float *)fz_dup(lo, lb), *ro0 = (float *)fz_dup(ro, rb);
        int64_t rslots0[MAX_N + 1];
        memcpy(rslots0, rslots, sizeof rslots);

        st = mlakv_read(&fc.c, m, rs, lat_null ? NULL : lo, rope_null ? NULL : ro);

        FUZZ_ASSERT((st == MLAKV_OK) == want || (alias_read && st != MLAKV_OK), "read returned %s, predicted %s (m %lld)",
                    mlakv_status_name(st), want ? "OK" : "a failure", (long long)m);
        FUZZ_ASSERT(fz_diff(cache1, fc.buf, fc.bytes) < 0, "read changed the cache");
        FUZZ_ASSERT(memcmp(rslots0, rslots, sizeof rslots) == 0, "read changed its slots");
        if (st != MLAKV_OK) {
            FUZZ_ASSERT(fz_diff(lo0, lo, lb) < 0 && fz_diff(ro0, ro, rb) < 0,
                        "failed read (%s) changed an output", mlakv_status_name(st));
        } else {
            for (int64_t i = 0; i < mm; i++) {
                float wl[MLAKV_LATENT_DIM], wr[MLAKV_ROPE_DIM];
                FUZZ_ASSERT(mlakv_decode_record(format, fc.buf + fz_slot_offset(&fc, rslots[i]),
                                                wl, wr) == MLAKV_OK, "decode_record failed");
                if (!lat_null)
                    FUZZ_ASSERT(memcmp(wl, lo + i * MLAKV_LATENT_DIM, sizeof wl) == 0,
                                "read latent of slot %lld differs from decode_record (alias %d)",
                                (long long)rslots[i], alias_read);
                if (!rope_null)
                    FUZZ_ASSERT(memcmp(wr, ro + i * MLAKV_ROPE_DIM, sizeof wr) == 0,
                                "read rope of slot %lld differs from decode_record",
                                (long long)rslots[i]);
            }
            size_t lt = (size_t)mm * MLAKV_LATENT_DIM, rt = (size_t)mm * MLAKV_ROPE_DIM;
            FUZZ_ASSERT(fz_diff(lo0 + (lat_null ? 0 : lt), lo + (lat_null ? 0 : lt),
                                lb - (lat_null ? 0 : lt * 4)) < 0 || alias_read,
                        "read wrote latent bytes it should not have");
            FUZZ_ASSERT(fz_diff(ro0 + (rope_null ? 0 : rt), ro + (rope_null ? 0 : rt),
                                rb - (rope_null ? 0 : rt * 4)) < 0,
                        "read wrote rope bytes it should not have");
        }
        free(cache1);
        free(lo0);
        free(ro0);
        free(lo);
        free(ro);
    }

done_noread:
    free(kv.mem);
    free(pe.mem);
    fz_cache_free(&fc);
    return 0;
}
