/* Split-KV merge of (out, lse) partials, in float64, rounded once to fp32. */
#include <math.h>
#include <string.h>

#include "common/status.h"
#include "core/validate.h"

#define TILE 256 /* output elements accumulated at a time in double */

mlakv_status mlakv_merge_partials(int64_t n_parts, int64_t rows, int64_t dim,
                                  const float *out_parts, const float *lse_parts,
                                  const float *sink, float *out, float *lse) {
    static const char fn[] = "mlakv_merge_partials";
    if (n_parts < 1 || rows < 1 || dim < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n_parts, rows and dim must be >= 1 (got %lld, "
                          "%lld, %lld)", fn, (long long)n_parts, (long long)rows, (long long)dim);
    MLAKV_CHECK_NOT_NULL(fn, out_parts);
    MLAKV_CHECK_NOT_NULL(fn, lse_parts);
    MLAKV_CHECK_NOT_NULL(fn, out);
    if (rows > INT64_MAX / dim || n_parts > INT64_MAX / (rows * dim) ||
        (uint64_t)(n_parts * rows * dim) > SIZE_MAX / sizeof(float))
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: n_parts * rows * dim overflows", fn);
    if ((uintptr_t)out_parts % 4 != 0 || (uintptr_t)lse_parts % 4 != 0 ||
        (uintptr_t)sink % 4 != 0 || (uintptr_t)out % 4 != 0 || (uintptr_t)lse % 4 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: out_parts, lse_parts, sink, out or lse not aligned to 4 bytes", fn);
    {
        const uint64_t nr = (uint64_t)n_parts * (uint64_t)rows;
        const mlakv_span outs[2] = {
            mlakv_span_of("out", out, (uint64_t)rows * (uint64_t)dim * sizeof(float)),
            mlakv_span_of("lse", lse, (uint64_t)rows * sizeof(float))};
        const mlakv_span ins[3] = {
            mlakv_span_of("out_parts", out_parts, nr * (uint64_t)dim * sizeof(float)),
            mlakv_span_of("lse_parts", lse_parts, nr * sizeof(float)),
            mlakv_span_of("sink", sink, (uint64_t)rows * sizeof(float))};
        MLAKV_TRY(mlakv_check_overlap(fn, outs, 2, ins, 3));
    }
    for (int64_t i = 0; i < n_parts * rows; i++)
        if (isnan(lse_parts[i]) || lse_parts[i] == INFINITY)
            return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: lse_parts[%lld] is NaN or +Inf",
                              fn, (long long)i);
    if (sink)
        for (int64_t r = 0; r < rows; r++)
            if (isnan(sink[r]) || sink[r] == INFINITY)
                return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: sink[%lld] is NaN or +Inf", fn,
                                  (long long)r);

    double acc[TILE];
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, sk = sink ? (double)sink[r] : -INFINITY;
        for (int64_t i = 0; i < n_parts; i++)
            if (lse_parts[i * rows + r] > m) m = lse_parts[i * rows + r];
        if (sk > m) m = sk;
        float *o = out + r * dim;
        if (m == -INFINITY) { /* every partial empty, no sink */
            memset(o, 0, (size_t)dim * sizeof(float));
            if (lse) lse[r] = -INFINITY;
            continue;
        }
        double den = sk != -INFINITY ? exp(sk - m) : 0.0;
        for (int64_t i = 0; i < n_parts; i++) {
            double li = lse_parts[i * rows + r];
            if (li != -INFINITY) den += exp(li - m);
        }
        for (int64_t d0 = 0; d0 < dim; d0 += TILE) {
            int64_t nd = dim - d0 < TILE ? dim - d0 : TILE;
            for (int64_t d = 0; d < nd; d++) acc[d] = 0.0;
            for (int64_t i = 0; i < n_parts; i++) {
                double li = lse_parts[i * rows + r];
                if (li == -INFINITY) continue; /* empty partial: its out is not read */
                double w = exp(li - m);
                const float *oi = out_parts + (i * rows + r) * dim + d0;
                for (int64_t d = 0; d < nd; d++) acc[d] += w * oi[d];
            }
            for (int64_t d = 0; d < nd; d++) o[d0 + d] = (float)(acc[d] / den);
        }
        if (lse) lse[r] = (float)(m + log(den));
    }
    return MLAKV_OK;
}
