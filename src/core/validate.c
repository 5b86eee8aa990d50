/* Argument validators shared by the CPU entry points and the CUDA entry points' host-side
 * checks (core/validate.h). */
#include "core/validate.h"

#include <stdint.h>

#include "common/status.h"

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
    return MLAKV_OK;
}
