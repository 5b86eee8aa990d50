/* Fuzz mlakv_sparse_decode and mlakv_sparse_decode_partial over one small cache.
 *
 * Inputs: cache geometry and format (sometimes a descriptor that must be rejected); records of
 * arbitrary bytes, or encoded from fuzzed tokens, or encoded then corrupted; batch, s_q, heads
 * (past the 64-head group), topk (past the 64-candidate chunk); q (F32/BF16, NaN/Inf, any
 * exponent) with padded, zero or invalid strides; indices (valid, -1, other negatives,
 * capacity, INT32_MAX, raw) with padded or invalid strides; lengths (none, in range, negative,
 * beyond topk); sink (none, finite, -Inf, NaN, +Inf); sm_scale (incl. NaN/Inf); out dtype;
 * lse or none; mode; thread count; a candidate range for partials.
 *
 * Properties:
 *  - the call succeeds exactly when the documented preconditions hold;
 *  - no call changes the cache, q, indices, lengths, sink or the argument struct;
 *  - a failed call changes no byte of out / lse (or of the partial outputs);
 *  - nothing is written past the outputs' ends;
 *  - a row with no valid active candidate and no sink gives out 0 and lse -Inf;
 *  - a row whose q, valid keys/values and sink are finite and moderate (|x| <= 2^40) gives
 *    finite out, |out| <= max |v| (a convex combination; bf16 rounding allowed), finite lse;
 *  - exact mode matches a float64 reference computed here from mlakv_decode_record values;
 *    engine mode matches it within bf16 tolerances when the scores are small.
 *
 * MLAKV_FUZZ_ALIASING (off by default): out may also overlap indices, or be q itself. Then a
 * call must either fail changing nothing or give the result the entry-time values imply.
 */
#include "fuzz_common.h"

#ifndef MLAKV_FUZZ_ALIASING
#define MLAKV_FUZZ_ALIASING 0
#endif

#define BIG 0x1p40

static int mul_add(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (a < 0 || b < 0 || c < 0) return 0;
    if (b != 0 && a > (INT64_MAX - c) / b) return 0;
    *r = a * b + c;
    return 1;
}

/* A stride for a dimension of `count` entries whose rows need `min` elements: usually
 * contiguous (`dense`) or padded; sometimes too small, negative, zero for a single entry, or
 * overflowing. *valid tells whether the library must accept it. */
static int64_t pick_stride(fz_in *in, int64_t count, int64_t min, int64_t dense, int *valid) {
    uint8_t k = fz_u8(in) % 32;
    *valid = 1;
    switch (k) {
    case 0: *valid = count <= 1; return min - fz_range(in, 1, 3);
    case 1: *valid = 0; return -fz_range(in, 1, 5);
    case 2: *valid = count <= 1; return INT64_MAX - fz_range(in, 0, 3); /* overflow unless 1 */
    case 3: *valid = count <= 1; return 0;
    case 4: case 5: return dense + fz_range(in, 1, 9);
    case 6: return min; /* tight even when dense is padded */
    default: return dense;
    }
}

static int32_t pick_index(fz_in *in, int64_t cap) {
    uint8_t k = fz_u8(in) % 16;
    int32_t v = cap > 0 ? (int32_t)(fz_u16(in) % (uint64_t)cap) : 0;
    switch (k) {
    case 10: case 11: return -1;
    case 12: return fz_u8(in) & 1 ? INT32_MIN : -(int32_t)fz_range(in, 2, 300);
    case 13: return (int32_t)(cap + fz_range(in, 0, 3));
    case 14: return INT32_MAX;
    case 15: return (int32_t)fz_u32(in);
    default: return v;
    }
}

/* Double-precision reference of one (row, head) over positions [c0, c1). */
typedef struct {
    int nvalid;
    int finite_ok;  /* all inputs finite and moderate */
    double smax;    /* sum |sm * q_d * k_d| bound over valid candidates */
    double vmax;    /* max |v| */
    double out[512], lse;
} ref_row;

static void reference(const float (*dec)[576], const float *q, float sm, const int32_t *idx, int64_t c0,
                      int64_t c1, int has_sink, float sink, ref_row *R) {
    memset(R, 0, sizeof *R);
    R->finite_ok = 1;
    for (int d = 0; d < 576; d++)
        if (!(fabsf(q[d]) <= BIG)) R->finite_ok = 0;
    if (has_sink && !(fabsf(sink) <= BIG)) R->finite_ok = 0;
    int64_t n = c1 > c0 ? c1 - c0 : 0;
    double *sc = (double *)malloc((size_t)(n ? n : 1) * sizeof(double));
    float(*v)[512] = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!sc || !v) abort();
    double m = -INFINITY;
    for (int64_t c = c0; c < c1; c++) {
        if (idx[c] < 0) continue;
        const float *k = dec[idx[c]];
        double s = 0, bound = 0;
        for (int d = 0; d < 576; d++) {
            if (!(fabsf(k[d]) <= BIG)) R->finite_ok = 0;
            s += (double)q[d] * (double)k[d];
            bound += fabs((double)q[d] * (double)k[d]);
        }
        for (int d = 0; d < 512; d++)
            if (fabs((double)k[d]) > R->vmax) R->vmax = fabs((double)k[d]);
        bound *= fabs((double)sm);
        if (bound > R->smax) R->smax = bound;
        sc[R->nvalid] = (double)sm * s;
        memcpy(v[R->nvalid], k, sizeof v[0]);
        if (sc[R->nvalid] > m) m = sc[R->nvalid];
        R->nvalid++;
    }
    if (R->finite_ok) {
        double sk = has_sink ? (double)sink : -INFINITY;
        if (sk > m) m = sk;
        double l = sk != -INFINITY ? exp(sk - m) : 0.0;
        for (int j = 0; j < R->nvalid; j++) l += exp(sc[j] - m);
        if (l > 0) {
            for (int j = 0; j < R->nvalid; j++) {
                double p = exp(sc[j] - m);
                for (int d = 0; d < 512; d++) R->out[d] += p * v[j][d];
            }
            for (int d = 0; d < 512; d++) R->out[d] /= l;
            R->lse = m + log(l);
        } else {
            R->lse = -INFINITY;
        }
    }
    free(sc);
    free(v);
}

static float load_out(const void *out, mlakv_dtype dt, size_t i) {
    if (dt == MLAKV_F32) return ((const float *)out)[i];
    return mlakv_bf16_to_f32(((const uint16_t *)out)[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = fz_make(data, size);
    fz_cache fc;
    fz_cache_make(&in, &fc, 3, 8);
    const int64_t cap = fc.capacity;

    /* records */
    if (fc.valid) {
        uint8_t rmode = fz_u8(&in) % 4;
        uint64_t s = fz_u32(&in);
        for (int64_t slot = 0; slot < cap; slot++) {
            uint8_t *r = fc.buf + fz_slot_offset(&fc, slot);
            if (rmode == 0) {
                for (int64_t b = 0; b < fc.record_bytes; b++) r[b] = (uint8_t)fz_mix(&s);
            } else {
                float lat[512], rope[64];
                fz_fill_floats(&in, lat, 512);
                fz_fill_floats(&in, rope, 64);
                mlakv_write_options o = mlakv_write_options_default();
                if (fz_u8(&in) & 1) o.fp8_scale_recipe = MLAKV_FP8_SCALE_POW2;
                if (mlakv_encode_record(fc.c.format, lat, rope, r, &o) != MLAKV_OK) abort();
                if (rmode == 3) { /* corrupt a few bytes */
                    int flips = fz_u8(&in) % 4;
                    for (int f = 0; f < flips; f++)
                        r[fz_u16(&in) % (uint64_t)fc.record_bytes] = fz_u8(&in);
                }
            }
        }
    }

    /* shape */
    mlakv_decode_args a;
    memset(&a, 0, sizeof a);
    uint8_t gsel = fz_u8(&in);
    a.batch = fz_range(&in, 1, 3);
    a.s_q = fz_range(&in, 1, 2);
    a.heads = gsel % 8 == 7 ? fz_range(&in, 60, 70) : fz_range(&in, 1, 4);
    a.topk = gsel % 16 == 6 ? fz_range(&in, 60, 70) : fz_range(&in, 1, 10);
    int geom_ok = 1;
    if (gsel % 32 == 5) {
        int64_t *dims[4] = {&a.batch, &a.s_q, &a.heads, &a.topk};
        *dims[fz_u8(&in) % 4] = fz_u8(&in) & 1 ? 0 : -fz_range(&in, 1, 3);
        geom_ok = 0;
    }
    int64_t B = a.batch > 0 ? a.batch : 1, T = a.s_q > 0 ? a.s_q : 1, H = a.heads > 0 ? a.heads : 1,
            K = a.topk > 0 ? a.topk : 1;

    /* dtypes, mode, threads, sm_scale */
    uint8_t tsel = fz_u8(&in);
    a.q_dtype = tsel % 8 < 4 ? MLAKV_BF16 : tsel % 8 < 7 ? MLAKV_F32 : (mlakv_dtype)(tsel & 8 ? MLAKV_F16 : 7);
    a.out_dtype = (tsel >> 3) % 8 < 4 ? MLAKV_BF16 : (tsel >> 3) % 8 < 7 ? MLAKV_F32 : (mlakv_dtype)(tsel & 64 ? MLAKV_F16 : -1);
    int dtype_ok = (a.q_dtype == MLAKV_F32 || a.q_dtype == MLAKV_BF16);
    int out_dtype_ok = (a.out_dtype == MLAKV_F32 || a.out_dtype == MLAKV_BF16);
    uint8_t msel = fz_u8(&in);
    a.mode = msel % 16 == 15 ? (mlakv_attn_mode)(msel & 16 ? 2 : -1) : (mlakv_attn_mode)(msel & 1);
    int mode_ok = msel % 16 != 15;
    a.num_threads = msel % 8 == 6 ? -1 : (int)((msel >> 5) % 3); /* 0 = all cores */
    int threads_ok = a.num_threads >= 0;
    uint8_t ssel = fz_u8(&in) % 8;
    a.sm_scale = ssel < 4 ? 0.0625f : ssel < 6 ? fz_float(&in, 1) : ssel == 6 ? fz_special(&in) : -0.1f;
    int sm_ok = isfinite(a.sm_scale);

    /* strides */
    int v1, v2, v3, v4, v5;
    a.q_stride_head = pick_stride(&in, a.heads, 576, 576, &v1);
    int64_t qsh = a.q_stride_head >= 576 && a.q_stride_head < 100000 ? a.q_stride_head : 576;
    a.q_stride_token = pick_stride(&in, a.s_q, 576, H * qsh, &v2);
    int64_t qst = a.q_stride_token >= H * qsh && a.q_stride_token < 10000000 ? a.q_stride_token : H * qsh;
    a.q_stride_batch = pick_stride(&in, a.batch, 576, T * qst, &v3);
    a.indices_stride_token = pick_stride(&in, a.s_q, a.topk, K, &v4);
    int64_t ist = a.indices_stride_token >= K && a.indices_stride_token < 100000 ? a.indices_stride_token : K;
    a.indices_stride_batch = pick_stride(&in, a.batch, a.topk, T * ist, &v5);
    int strides_ok = v1 && v2 && v3 && v4 && v5;
    /* the exact check: non-negative, no overlap when count > 1, no 64-bit overflow */
    int64_t qmax = 575, imax = K - 1;
    if (geom_ok && strides_ok)
        strides_ok = mul_add(a.batch - 1, a.q_stride_batch, qmax, &qmax) &&
                     mul_add(a.s_q - 1, a.q_stride_token, qmax, &qmax) &&
                     mul_add(a.heads - 1, a.q_stride_head, qmax, &qmax) &&
                     mul_add(a.batch - 1, a.indices_stride_batch, imax, &imax) &&
                     mul_add(a.s_q - 1, a.indices_stride_token, imax, &imax);
    int alloc_real = geom_ok && strides_ok && qmax < (1 << 22) && imax < (1 << 20);
    size_t qn = alloc_real ? (size_t)qmax + 1 : 576, in_n = alloc_real ? (size_t)imax + 1 : 16;

    /* q */
    size_t qes = a.q_dtype == MLAKV_F32 ? 4 : 2;
    void *q = malloc(qn * qes);
    float *qf = (float *)malloc(qn * sizeof(float));
    if (!q || !qf) abort();
    fz_fill_floats(&in, qf, (int64_t)qn);
    for (size_t i = 0; i < qn; i++) {
        if (qes == 4) {
            ((float *)q)[i] = qf[i];
        } else {
            uint16_t h = mlakv_f32_to_bf16(qf[i]);
            ((uint16_t *)q)[i] = h;
            qf[i] = mlakv_bf16_to_f32(h);
        }
    }
    /* indices */
    int32_t *idx = (int32_t *)malloc(in_n * sizeof(int32_t));
    if (!idx) abort();
    for (size_t i = 0; i < in_n; i++) idx[i] = (int32_t)fz_range(&in, -1, 0); /* gaps: -1 or 0 */
    uint8_t isel = fz_u8(&in) % 4;
    for (int64_t b = 0; alloc_real && b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < K; c++) {
                int32_t v = pick_index(&in, cap);
                if (isel <= 1 && v >= cap) v = -1; /* all in range */
                idx[b * a.indices_stride_batch + t * a.indices_stride_token + c] = v;
            }
    /* lengths, sink */
    int32_t *lengths = NULL;
    float *sink = NULL;
    int lengths_ok = 1, sink_ok = 1;
    uint8_t lsel = fz_u8(&in);
    if (lsel % 3 == 1) {
        lengths = (int32_t *)malloc((size_t)B * sizeof(int32_t));
        if (!lengths) abort();
        for (int64_t b = 0; b < B; b++) {
            uint8_t k = fz_u8(&in) % 16;
            lengths[b] = k == 15 ? (int32_t)fz_u32(&in) : k == 14 ? -1 : (int32_t)fz_range(&in, 0, K + 2);
            if (lengths[b] < 0) lengths_ok = 0;
        }
    }
    if ((lsel >> 2) % 3 == 1) {
        sink = (float *)malloc((size_t)H * sizeof(float));
        if (!sink) abort();
        for (int64_t h = 0; h < H; h++) {
            uint8_t k = fz_u8(&in) % 8;
            sink[h] = k < 4 ? (float)fz_range(&in, -20, 20) : k < 6 ? -INFINITY : k == 6 ? fz_special(&in) : fz_float(&in, 0);
            if (isnan(sink[h]) || sink[h] == INFINITY) sink_ok = 0;
        }
    }
    a.q = q;
    a.indices = idx;
    a.lengths = lengths;
    a.sink = sink;

    /* outputs, each with a canary tail */
    const size_t rows = (size_t)(B * T), nout = rows * (size_t)H * 512;
    size_t oes = a.out_dtype == MLAKV_BF16 ? 2 : 4;
    size_t out_bytes = nout * oes + 64, lse_bytes = rows * (size_t)H * 4 + 64;
    uint8_t *out = (uint8_t *)malloc(out_bytes), *lse = (uint8_t *)malloc(lse_bytes);
    if (!out || !lse) abort();
    fz_poison(out, out_bytes, 0x6B);
    fz_poison(lse, lse_bytes, 0xB6);
    int want_lse = fz_u8(&in) % 4 != 0;
    a.out = out;
    a.lse = want_lse ? (float *)(void *)lse : NULL;

    /* partial call? */
    uint8_t psel = fz_u8(&in);
    int partial = psel % 4 == 0;
    int64_t cb = 0, ce = K, range_ok = 1;
    if (partial) {
        cb = fz_range(&in, -1, K + 1);
        ce = fz_range(&in, -1, K + 1);
        if (psel % 32 == 4) cb = INT64_MIN, ce = INT64_MAX;
        range_ok = cb >= 0 && cb <= ce && ce <= a.topk;
    }
    int alias = 0;
#if MLAKV_FUZZ_ALIASING
    void *alias_mem = NULL;
    if (!partial && alloc_real && fz_u8(&in) % 4 == 0) {
        if (fz_u8(&in) & 1 && oes == qes) { /* out is q */
            if (qn * qes < nout * oes) {
                alias_mem = malloc(nout * oes + 64);
                if (!alias_mem) abort();
                memcpy(alias_mem, q, qn * qes);
                free(q);
                q = alias_mem;
                a.q = q;
            }
            a.out = q;
        } else { /* indices inside out */
            size_t room = out_bytes - 64 - in_n * 4;
            size_t at = ((size_t)fz_u16(&in) % (room + 1)) & ~(size_t)3;
            memcpy(out + at, idx, in_n * 4);
            free(idx);
            idx = NULL;
            a.indices = (const int32_t *)(const void *)(out + at);
        }
        alias = 1;
    }
    const int32_t *idx_entry = alias ? (const int32_t *)fz_dup(a.indices, in_n * 4) : idx;
#else
    const int32_t *idx_entry = idx;
#endif

    /* predicted outcome */
    int want_ok = fc.valid && geom_ok && dtype_ok && (partial || out_dtype_ok) && mode_ok &&
                  threads_ok && sm_ok && strides_ok && (partial ? range_ok : sink_ok) && lengths_ok;
    int64_t c0 = partial ? cb : 0, c1 = partial ? ce : a.topk;
    if (want_ok) {
        for (int64_t b = 0; want_ok && b < B; b++) {
            int64_t e = c1;
            if (lengths && lengths[b] < e) e = lengths[b];
            for (int64_t t = 0; want_ok && t < T; t++)
                for (int64_t c = c0; c < e; c++)
                    if (idx_entry[b * a.indices_stride_batch + t * a.indices_stride_token + c] >= cap) {
                        want_ok = 0;
                        break;
                    }
        }
    }

    /* snapshots */
    uint8_t *cache0 = fz_dup(fc.buf, fc.bytes);
    void *q0 = fz_dup(q, qn * qes);
    void *idx0 = fz_dup(idx_entry, in_n * 4);
    void *len0 = lengths ? fz_dup(lengths, (size_t)B * 4) : NULL;
    void *sink0 = sink ? fz_dup(sink, (size_t)H * 4) : NULL;
    uint8_t *out0 = fz_dup(out, out_bytes), *lse0 = fz_dup(lse, lse_bytes);
    mlakv_decode_args a0 = a;
    float *pout = NULL, *plse = NULL;
    size_t pout_bytes = rows * (size_t)H * 512 * 4 + 64, plse_bytes = rows * (size_t)H * 4 + 64;
    uint8_t *pout0 = NULL, *plse0 = NULL;
    if (partial) {
        pout = (float *)malloc(pout_bytes);
        plse = (float *)malloc(plse_bytes);
        if (!pout || !plse) abort();
        fz_poison((uint8_t *)pout, pout_bytes, 0x17);
        fz_poison((uint8_t *)plse, plse_bytes, 0x71);
        pout0 = fz_dup(pout, pout_bytes);
        plse0 = fz_dup(plse, plse_bytes);
    }

    mlakv_status st = partial ? mlakv_sparse_decode_partial(&fc.c, &a, cb, ce, pout, plse)
                              : mlakv_sparse_decode(&fc.c, &a);

    FUZZ_ASSERT((st == MLAKV_OK) == want_ok || (alias && st != MLAKV_OK),
                "%s returned %s, predicted %s (cache valid %d geom %d dtypes %d %d mode %d "
                "threads %d sm %d strides %d range %d sink %d lengths %d)",
                partial ? "decode_partial" : "decode", mlakv_status_name(st),
                want_ok ? "OK" : "a failure", fc.valid, geom_ok, dtype_ok, out_dtype_ok, mode_ok,
                threads_ok, sm_ok, strides_ok, (int)range_ok, sink_ok, lengths_ok);
    FUZZ_ASSERT(memcmp(&a0, &a, sizeof a) == 0, "decode changed its argument struct");
    FUZZ_ASSERT(fz_diff(cache0, fc.buf, fc.bytes) < 0, "decode changed the cache");
    if (!alias) {
        FUZZ_ASSERT(fz_diff(q0, q, qn * qes) < 0, "decode changed q");
        FUZZ_ASSERT(fz_diff(idx0, idx, in_n * 4) < 0, "decode changed indices");
    }
    FUZZ_ASSERT(!lengths || fz_diff(len0, lengths, (size_t)B * 4) < 0, "decode changed lengths");
    FUZZ_ASSERT(!sink || fz_diff(sink0, sink, (size_t)H * 4) < 0, "decode changed sink");
    if (partial) {
        FUZZ_ASSERT(fz_diff(out0, out, out_bytes) < 0 && fz_diff(lse0, lse, lse_bytes) < 0,
                    "decode_partial wrote args->out or args->lse");
    }
    if (st != MLAKV_OK) {
        if (partial)
            FUZZ_ASSERT(fz_diff(pout0, pout, pout_bytes) < 0 && fz_diff(plse0, plse, plse_bytes) < 0,
                        "failed decode_partial (%s) changed an output", mlakv_status_name(st));
        else
            FUZZ_ASSERT(fz_diff(out0, out, out_bytes) < 0 && fz_diff(lse0, lse, lse_bytes) < 0,
                        "failed decode (%s) changed out or lse", mlakv_status_name(st));
    } else {
        const uint8_t *o = partial ? (const uint8_t *)pout : (const uint8_t *)a.out;
        const float *l = partial ? plse : a.lse;
        mlakv_dtype odt = partial ? MLAKV_F32 : a.out_dtype;
        size_t obytes = nout * (partial ? 4 : oes);
        if (!alias || a.out != q) {
            const uint8_t *o0 = partial ? pout0 : out0;
            FUZZ_ASSERT(fz_diff(o0 + obytes, o + obytes, 64) < 0, "decode wrote past out");
        }
        if (l) {
            const uint8_t *l0 = partial ? plse0 : lse0;
            FUZZ_ASSERT(fz_diff(l0 + rows * H * 4, (const uint8_t *)l + rows * H * 4, 64) < 0,
                        "decode wrote past lse");
        }
        if (!want_lse && !partial)
            FUZZ_ASSERT(fz_diff(lse0, lse, lse_bytes) < 0, "decode wrote lse it was not given");
        ref_row *R = (ref_row *)malloc(sizeof *R);
        float(*dec)[576] = malloc((size_t)cap * sizeof *dec); /* every record, decoded once */
        if (!R || !dec) abort();
        for (int64_t sl = 0; sl < cap; sl++)
            if (mlakv_decode_record(fc.c.format, fc.buf + fz_slot_offset(&fc, sl), dec[sl],
                                    dec[sl] + 512) != MLAKV_OK)
                abort();
        float qrow[576];
        for (int64_t b = 0; b < B; b++) {
            int64_t e = c1;
            if (lengths && lengths[b] < e) e = lengths[b];
            for (int64_t t = 0; t < T; t++) {
                const int32_t *ir = idx_entry + b * a.indices_stride_batch + t * a.indices_stride_token;
                for (int64_t h = 0; h < H; h++) {
                    const void *qsrc = q0;
                    int64_t qo = b * a.q_stride_batch + t * a.q_stride_token + h * a.q_stride_head;
                    for (int d = 0; d < 576; d++)
                        qrow[d] = qes == 4 ? ((const float *)qsrc)[qo + d]
                                           : mlakv_bf16_to_f32(((const uint16_t *)qsrc)[qo + d]);
                    int has_sink = !partial && sink && sink[h] != -INFINITY;
                    reference((const float(*)[576])dec, qrow, a.sm_scale, ir, c0, e, has_sink, has_sink ? sink[h] : 0.0f, R);
                    size_t r = (size_t)((b * T + t) * H + h);
                    float lv = l ? l[r] : 0.0f;
                    if (R->nvalid == 0 && !has_sink) {
                        for (int d = 0; d < 512; d++)
                            FUZZ_ASSERT(load_out(o, odt, r * 512 + d) == 0.0f,
                                        "empty row (b %lld t %lld h %lld): out[%d] = %g", (long long)b,
                                        (long long)t, (long long)h, d, load_out(o, odt, r * 512 + d));
                        FUZZ_ASSERT(!l || lv == -INFINITY, "empty row: lse %g, want -inf", lv);
                        continue;
                    }
                    if (!R->finite_ok) continue;
                    const double vbound = R->vmax * (1 + 0x1p-6) + 1e-37;
                    for (int d = 0; d < 512; d++) {
                        float ov = load_out(o, odt, r * 512 + d);
                        FUZZ_ASSERT(isfinite(ov) && fabs((double)ov) <= vbound,
                                    "format %d mode %d: moderate row (b %lld t %lld h %lld, %d valid, "
                                    "score bound %g, max|v| %g) gives out[%d] = %g",
                                    (int)fc.c.format, (int)a.mode, (long long)b, (long long)t,
                                    (long long)h, R->nvalid, R->smax, R->vmax, d, ov);
                    }
                    FUZZ_ASSERT(!l || isfinite(lv) || (R->nvalid == 0 && !has_sink),
                                "moderate row: lse %g (%d valid)", lv, R->nvalid);
                    /* against the float64 reference */
                    double tol_out, tol_lse;
                    if (a.mode == MLAKV_ATTN_EXACT && R->smax <= 1e6) {
                        tol_out = 1e-5 * R->vmax;
                        tol_lse = 1e-5 * (1 + fabs(R->lse));
                    } else if (a.mode == MLAKV_ATTN_ENGINE && R->smax <= 0.5) {
                        tol_out = 0.03 * R->vmax;
                        tol_lse = 0.03;
                    } else {
                        continue;
                    }
                    if (odt == MLAKV_BF16) tol_out += 0x1p-8 * R->vmax;
                    for (int d = 0; d < 512; d++) {
                        float ov = load_out(o, odt, r * 512 + d);
                        FUZZ_ASSERT(fabs((double)ov - R->out[d]) <= tol_out + 1e-37,
                                    "format %d mode %d: out[%d] = %.9g, reference %.9g (tol %g, "
                                    "%d valid, score bound %g)", (int)fc.c.format, (int)a.mode, d,
                                    ov, R->out[d], tol_out, R->nvalid, R->smax);
                    }
                    if (l)
                        FUZZ_ASSERT(fabs((double)lv - R->lse) <= tol_lse,
                                    "format %d mode %d: lse %.9g, reference %.9g", (int)fc.c.format,
                                    (int)a.mode, lv, R->lse);
                }
            }
        }
        free(R);
        free(dec);
    }

    free(cache0), free(q0), free(idx0), free(len0), free(sink0), free(out0), free(lse0);
    free(pout0), free(plse0), free(pout), free(plse);
#if MLAKV_FUZZ_ALIASING
    if (alias) free((void *)idx_entry);
#endif
    free(q), free(qf), free(idx), free(lengths), free(sink), free(out), free(lse);
    fz_cache_free(&fc);
    return 0;
}
