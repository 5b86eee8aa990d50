/* Argument validators shared by the CPU entry points and the CUDA entry points' host-side
 * checks (core/validate.h). */
#include "core/validate.h"

#include <math.h>
#include <stdint.h>

#include "common/status.h"

mlakv_status mlakv_check_cache_aligned16(const char *fn, const mlakv_cache *cache) {
    if ((uintptr_t)cache->base % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: cache->base (%p) is not 16-byte aligned", fn,
                          cache->base);
    if (cache->block_stride_bytes % 16 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: cache->block_stride_bytes %lld is not a multiple of 16", fn,
                          (long long)cache->block_stride_bytes);
    return MLAKV_OK;
}

mlakv_status mlakv_check_rows(const char *fn, const char *name, const void *p, int64_t n,
                              int64_t cols, int64_t stride, mlakv_dtype dtype) {
    size_t esz = mlakv_dtype_bytes(dtype);
    if (esz == 0) return mlakv_fail(MLAKV_ERR_DTYPE, "%s: unknown dtype %d", fn, (int)dtype);
    if (n == 0) return MLAKV_OK;
    if (p == NULL) return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
    if (stride < cols)
        return mlakv_fail(MLAKV_ERR_STRIDE, "%s: %s row stride %lld < %lld elements", fn, name,
                          (long long)stride, (long long)cols);
    /* the byte extent must fit int64 (GPU kernels index in 64-bit bytes) and size_t */
    const uint64_t max_bytes = (uint64_t)SIZE_MAX < (uint64_t)INT64_MAX ? (uint64_t)SIZE_MAX
                                                                        : (uint64_t)INT64_MAX;
    if (n - 1 > (INT64_MAX - cols) / stride ||
        (uint64_t)((n - 1) * stride + cols) > max_bytes / esz)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: %s of %lld rows with stride %lld overflows",
                          fn, name, (long long)n, (long long)stride);
    if ((uintptr_t)p % esz != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: %s is not aligned to its %zu-byte elements",
                          fn, name, esz);
    return MLAKV_OK;
}

/* a*b + c into *r without int64 overflow (all non-negative). */
static int mul_add_ok(int64_t a, int64_t b, int64_t c, int64_t *r) {
    if (a < 0 || b < 0 || c < 0) return 0;
    if (b != 0 && a > (INT64_MAX - c) / b) return 0;
    *r = a * b + c;
    return 1;
}

/* Strides of q and indices: non-negative, a dimension with more than one entry may not overlap
 * rows, and the largest element offsets and the output size fit 64 bits and size_t. Shared by
 * the CPU decoder and the CUDA decoder's host checks. */
mlakv_status mlakv_check_decode_strides(const char *fn, const mlakv_decode_args *a) {
    struct { const char *name; int64_t v, count, min; } st[5] = {
        {"q_stride_batch", a->q_stride_batch, a->batch, MLAKV_QK_DIM},
        {"q_stride_token", a->q_stride_token, a->s_q, MLAKV_QK_DIM},
        {"q_stride_head", a->q_stride_head, a->heads, MLAKV_QK_DIM},
        {"indices_stride_batch", a->indices_stride_batch, a->batch, a->topk},
        {"indices_stride_token", a->indices_stride_token, a->s_q, a->topk},
    };
    for (int i = 0; i < 5; i++) {
        if (st[i].v < 0 || (st[i].count > 1 && st[i].v < st[i].min))
            return mlakv_fail(MLAKV_ERR_STRIDE, "%s: args->%s = %lld (must be >= %lld)", fn,
                              st[i].name, (long long)st[i].v, (long long)st[i].min);
    }
    int64_t qmax = MLAKV_QK_DIM - 1, imax = a->topk - 1, rows, outn;
    if (!mul_add_ok(a->batch - 1, a->q_stride_batch, qmax, &qmax) ||
        !mul_add_ok(a->s_q - 1, a->q_stride_token, qmax, &qmax) ||
        !mul_add_ok(a->heads - 1, a->q_stride_head, qmax, &qmax) ||
        !mul_add_ok(a->batch - 1, a->indices_stride_batch, imax, &imax) ||
        !mul_add_ok(a->s_q - 1, a->indices_stride_token, imax, &imax) ||
        !mul_add_ok(a->batch, a->s_q, 0, &rows) || !mul_add_ok(rows, a->heads, 0, &outn) ||
        !mul_add_ok(outn, MLAKV_V_DIM * 4, 0, &outn) || (uint64_t)qmax > SIZE_MAX / 4 ||
        (uint64_t)imax > SIZE_MAX / 4 || (uint64_t)outn > SIZE_MAX)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: tensor sizes or strides overflow 64 bits", fn);
    return MLAKV_OK;
}

mlakv_status mlakv_check_write_options(const char *fn, const mlakv_write_options *options) {
    if (options && options->fp8_scale_recipe != MLAKV_FP8_SCALE_VLLM &&
        options->fp8_scale_recipe != MLAKV_FP8_SCALE_POW2)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: unknown fp8_scale_recipe %d", fn,
                          (int)options->fp8_scale_recipe);
    if (options && options->nvfp4_encoder != MLAKV_NVFP4_ENCODER_STANDARD &&
        options->nvfp4_encoder != MLAKV_NVFP4_ENCODER_ACCURATE)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: unknown nvfp4_encoder %d", fn,
                          (int)options->nvfp4_encoder);
    return MLAKV_OK;
}

mlakv_status mlakv_check_latent_scale(const char *fn, mlakv_format format, float latent_scale) {
    const int static_nvfp4 = format == MLAKV_NVFP4_DS_MLA || format == MLAKV_NVFP4_FP8_ROPE;
    if (!(latent_scale > 0.0f) || !isfinite(latent_scale))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: cache->latent_scale is %g; it must be finite and > 0 (1.0 for no "
                          "scaling)", fn, (double)latent_scale);
    if (!static_nvfp4 && latent_scale != 1.0f)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: cache->latent_scale is %g; the %s format takes only 1.0 (a latent "
                          "scale applies to nvfp4_ds_mla and nvfp4_fp8_rope)", fn,
                          (double)latent_scale, mlakv_format_get(format)->name);
    return MLAKV_OK;
}

mlakv_status mlakv_check_gather_args(const char *fn, int64_t n, const int32_t *slots,
                                     int64_t out_row_stride) {
    if (n < 0) return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n is %lld, must be >= 0", fn, (long long)n);
    if (out_row_stride < 0)
        return mlakv_fail(MLAKV_ERR_STRIDE, "%s: out_row_stride %lld is negative", fn,
                          (long long)out_row_stride);
    if (n == 0) return MLAKV_OK; /* nothing is read */
    MLAKV_CHECK_NOT_NULL(fn, slots);
    if ((uintptr_t)slots % sizeof(int32_t) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: slots is not 4-byte aligned", fn);
    return MLAKV_OK;
}

mlakv_status mlakv_check_upconvert_args(const char *fn, int64_t batch, const int32_t *block_table,
                                        int64_t block_table_stride, const int32_t *seq_lens,
                                        const int32_t *workspace_starts,
                                        const int32_t *seq_starts, int64_t out_rows,
                                        int64_t out_row_stride) {
    if (batch < 0)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: batch is %lld, must be >= 0", fn, (long long)batch);
    if (out_rows < 0)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: out_rows is %lld, must be >= 0", fn,
                          (long long)out_rows);
    if (block_table_stride < 1)
        return mlakv_fail(MLAKV_ERR_STRIDE, "%s: block_table_stride %lld, must be >= 1", fn,
                          (long long)block_table_stride);
    if (out_row_stride < 0)
        return mlakv_fail(MLAKV_ERR_STRIDE, "%s: out_row_stride %lld is negative", fn,
                          (long long)out_row_stride);
    if (batch == 0) return MLAKV_OK; /* nothing is read */
    MLAKV_CHECK_NOT_NULL(fn, block_table);
    MLAKV_CHECK_NOT_NULL(fn, seq_lens);
    MLAKV_CHECK_NOT_NULL(fn, workspace_starts);
    if ((uintptr_t)block_table % 4 != 0 || (uintptr_t)seq_lens % 4 != 0 ||
        (uintptr_t)workspace_starts % 4 != 0 || (uintptr_t)seq_starts % 4 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: block_table, seq_lens, workspace_starts or seq_starts is not "
                          "4-byte aligned", fn);
    if (batch > INT64_MAX / block_table_stride ||
        (uint64_t)(batch * block_table_stride) > SIZE_MAX / sizeof(int32_t))
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: block_table of %lld x %lld overflows", fn,
                          (long long)batch, (long long)block_table_stride);
    return MLAKV_OK;
}

/* ---- overlapping buffers ------------------------------------------------------------------- */

mlakv_span mlakv_span_of(const char *name, const void *p, uint64_t bytes) {
    mlakv_span s;
    s.name = name;
    s.lo = (uintptr_t)p;
    s.period = 0;
    s.used = 0;
    /* saturate instead of wrapping (pointer arithmetic only; nothing is dereferenced) */
    s.hi = p == NULL || bytes == 0 ? s.lo
           : bytes > (uint64_t)(UINTPTR_MAX - s.lo) ? UINTPTR_MAX
                                                      : s.lo + (uintptr_t)bytes;
    return s;
}

mlakv_span mlakv_span_rows(const char *name, const void *p, uint64_t count, uint64_t used,
                           uint64_t period) {
    if (count == 0 || used == 0) return mlakv_span_of(name, NULL, 0);
    mlakv_span s = mlakv_span_of(name, p, (count - 1) * period + used);
    if (period > used && count > 1) {
        s.period = period;
        s.used = used;
    }
    return s;
}

/* Does the plain byte range [lo, hi) (non-empty) meet one of the pieces of periodic span a? */
static int meets_pieces(mlakv_span a, uintptr_t lo, uintptr_t hi) {
    if (lo <= a.lo) return 1; /* hi > a.lo: it reaches the first piece */
    const uint64_t off = (uint64_t)(lo - a.lo), k = off / a.period;
    if (off % a.period < a.used) return 1;
    /* the next piece starts at (k + 1) * period; it exists while it starts below a.hi */
    const uint64_t next = (k + 1) * a.period;
    return next < (uint64_t)(a.hi - a.lo) && next < (uint64_t)(hi - a.lo);
}

static int spans_overlap(mlakv_span a, mlakv_span b) {
    if (!(a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi)) return 0;
    if (a.period) return meets_pieces(a, b.lo, b.hi); /* b by its bounding range */
    if (b.period) return meets_pieces(b, a.lo, a.hi);
    return 1;
}

mlakv_status mlakv_check_overlap(const char *fn, const mlakv_span *outs, int n_outs,
                                 const mlakv_span *ins, int n_ins) {
    for (int i = 0; i < n_outs; i++) {
        for (int j = 0; j < n_ins; j++)
            if (spans_overlap(outs[i], ins[j]))
                return mlakv_fail(MLAKV_ERR_ALIASING,
                                  "%s: output %s overlaps input %s; nothing written", fn,
                                  outs[i].name, ins[j].name);
        for (int j = 0; j < i; j++)
            if (spans_overlap(outs[i], outs[j]))
                return mlakv_fail(MLAKV_ERR_ALIASING,
                                  "%s: outputs %s and %s overlap; nothing written", fn,
                                  outs[j].name, outs[i].name);
    }
    return MLAKV_OK;
}

mlakv_span mlakv_cache_span(const mlakv_cache *cache) {
    return mlakv_span_rows("cache", cache->base, (uint64_t)cache->num_blocks,
                           (uint64_t)cache->block_size * mlakv_record_bytes(cache->format),
                           (uint64_t)cache->block_stride_bytes);
}

/* The rows of an [n, cols] tensor with row stride `stride` (elements) of esz-byte elements.
 * The caller has checked that the extent fits 64 bits (mlakv_check_rows). */
static mlakv_span rows_span(const char *name, const void *p, int64_t n, int64_t cols,
                            int64_t stride, size_t esz) {
    return mlakv_span_rows(name, p, n > 0 ? (uint64_t)n : 0, (uint64_t)cols * esz,
                           (uint64_t)stride * esz);
}

mlakv_status mlakv_check_write_aliasing(const char *fn, const mlakv_cache *cache, int64_t n,
                                        const void *kv_c, int64_t kv_c_row_stride,
                                        const void *k_pe, int64_t k_pe_row_stride,
                                        mlakv_dtype dtype, const int64_t *slot_mapping,
                                        const void *counter) {
    const size_t esz = mlakv_dtype_bytes(dtype);
    const mlakv_span outs[2] = {mlakv_cache_span(cache),
                                mlakv_span_of("rejected_count", counter, 8)};
    const mlakv_span ins[3] = {
        rows_span("kv_c", kv_c, n, MLAKV_LATENT_DIM, kv_c_row_stride, esz),
        rows_span("k_pe", k_pe, n, MLAKV_ROPE_DIM, k_pe_row_stride, esz),
        mlakv_span_of("slot_mapping", slot_mapping, (uint64_t)(n > 0 ? n : 0) * sizeof(int64_t)),
    };
    return mlakv_check_overlap(fn, outs, 2, ins, 3);
}

/* out [rows, 576] bf16 rows and the 8-byte counter of a gather */
static void gather_output_spans(const void *out, int64_t rows, int64_t stride,
                                const void *counter, mlakv_span outs[2]) {
    outs[0] = mlakv_span_rows("out", out, rows > 0 ? (uint64_t)rows : 0,
                              MLAKV_QK_DIM * sizeof(uint16_t), (uint64_t)stride * sizeof(uint16_t));
    outs[1] = mlakv_span_of("invalid_count", counter, 8);
}

mlakv_status mlakv_check_gather_aliasing(const char *fn, const mlakv_cache *cache, int64_t n,
                                         const int32_t *slots, const void *out,
                                         int64_t out_row_stride, const void *counter) {
    mlakv_span outs[2];
    gather_output_spans(out, n, out_row_stride, counter, outs);
    const mlakv_span ins[2] = {mlakv_cache_span(cache),
                               mlakv_span_of("slots", slots, (uint64_t)n * sizeof(int32_t))};
    return mlakv_check_overlap(fn, outs, 2, ins, 2);
}

mlakv_status mlakv_check_upconvert_aliasing(const char *fn, const mlakv_cache *cache,
                                            int64_t batch, const int32_t *block_table,
                                            int64_t block_table_stride, const int32_t *seq_lens,
                                            const int32_t *workspace_starts,
                                            const int32_t *seq_starts, const void *out,
                                            int64_t out_rows, int64_t out_row_stride,
                                            const void *counter) {
    mlakv_span outs[2];
    gather_output_spans(out, out_rows, out_row_stride, counter, outs);
    const uint64_t ub = (uint64_t)batch * sizeof(int32_t);
    const mlakv_span ins[5] = {
        mlakv_cache_span(cache),
        mlakv_span_of("block_table", block_table,
                      (uint64_t)(batch * block_table_stride) * sizeof(int32_t)),
        mlakv_span_of("seq_lens", seq_lens, ub),
        mlakv_span_of("workspace_starts", workspace_starts, ub),
        mlakv_span_of("seq_starts", seq_starts, ub)};
    return mlakv_check_overlap(fn, outs, 2, ins, 5);
}

int mlakv_decode_input_spans(const mlakv_cache *cache, const mlakv_decode_args *a,
                             mlakv_span spans[MLAKV_DECODE_INPUT_SPANS]) {
    /* largest element offsets as mlakv_check_decode_strides bounds them */
    const uint64_t qn = (uint64_t)(a->batch - 1) * (uint64_t)a->q_stride_batch +
                        (uint64_t)(a->s_q - 1) * (uint64_t)a->q_stride_token +
                        (uint64_t)(a->heads - 1) * (uint64_t)a->q_stride_head + MLAKV_QK_DIM;
    const uint64_t in = (uint64_t)(a->batch - 1) * (uint64_t)a->indices_stride_batch +
                        (uint64_t)(a->s_q - 1) * (uint64_t)a->indices_stride_token +
                        (uint64_t)a->topk;
    size_t qesz = mlakv_dtype_bytes(a->q_dtype);
    spans[0] = mlakv_cache_span(cache);
    spans[1] = mlakv_span_of("q", a->q, qn * (qesz ? qesz : 4));
    spans[2] = mlakv_span_of("indices", a->indices, in * sizeof(int32_t));
    spans[3] = mlakv_span_of("lengths", a->lengths, (uint64_t)a->batch * sizeof(int32_t));
    spans[4] = mlakv_span_of("sink", a->sink, (uint64_t)a->heads * sizeof(float));
    return MLAKV_DECODE_INPUT_SPANS;
}

mlakv_status mlakv_check_decode_aliasing(const char *fn, const mlakv_cache *cache,
                                         const mlakv_decode_args *a, const void *workspace,
                                         size_t workspace_bytes) {
    mlakv_span ins[MLAKV_DECODE_INPUT_SPANS];
    const int n_ins = mlakv_decode_input_spans(cache, a, ins);
    const uint64_t rows = (uint64_t)a->batch * (uint64_t)a->s_q * (uint64_t)a->heads;
    size_t oesz = mlakv_dtype_bytes(a->out_dtype);
    const mlakv_span outs[4] = {
        mlakv_span_of("out", a->out, rows * MLAKV_V_DIM * (oesz ? oesz : 4)),
        mlakv_span_of("lse", a->lse, rows * sizeof(float)),
        mlakv_span_of("workspace", workspace, workspace_bytes),
        mlakv_span_of("invalid_index_count", a->invalid_index_count,
                      sizeof(*a->invalid_index_count)),
    };
    return mlakv_check_overlap(fn, outs, 4, ins, n_ins);
}
