/* Calibration of the static latent scale s_l (mlakv_cache.latent_scale): the layer's max |x|
 * over sample latents, and s_l = max_abs / 2688, so that the layer's largest value lands on the
 * largest NVFP4 value (E2M1 6 times E4M3 448) and quiet layers keep E4M3-normal group scales. */
#include <float.h>
#include <math.h>

#include "common/status.h"
#include "core/validate.h"
#include "format/scalar.h"

mlakv_status mlakv_latent_max_abs(int64_t n, const void *latent, int64_t row_stride,
                                  mlakv_dtype dtype, float *max_abs) {
    static const char fn[] = "mlakv_latent_max_abs";
    MLAKV_CHECK_NOT_NULL(fn, max_abs);
    if (n < 0) return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n is %lld, must be >= 0", fn, (long long)n);
    MLAKV_TRY(mlakv_check_rows(fn, "latent", latent, n, MLAKV_LATENT_DIM, row_stride, dtype));
    if ((uintptr_t)max_abs % sizeof(float) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: max_abs is not 4-byte aligned", fn);
    float m = *max_abs;
    if (!(m >= 0.0f) || isinf(m))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: *max_abs is %g on entry; set it to 0 before a layer's first batch",
                          fn, (double)m);
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < MLAKV_LATENT_DIM; j++) {
            const float a = fabsf(mlakv_load_as_f32(latent, dtype, i * row_stride + j));
            if (!isfinite(a))
                return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                                  "%s: latent[%lld, %d] is %s; calibration samples must be finite",
                                  fn, (long long)i, j, isnan(a) ? "NaN" : "Inf");
            if (a > m) m = a;
        }
    *max_abs = m;
    return MLAKV_OK;
}

mlakv_status mlakv_latent_scale(float max_abs, float *latent_scale) {
    static const char fn[] = "mlakv_latent_scale";
    MLAKV_CHECK_NOT_NULL(fn, latent_scale);
    if (!(max_abs >= 0.0f) || isinf(max_abs))
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                          "%s: max_abs is %g; it must be finite and >= 0", fn, (double)max_abs);
    float s = 1.0f; /* an all-zero layer: any scale stores zeros; keep the unscaled records */
    if (max_abs > 0.0f) {
        s = max_abs / MLAKV_LATENT_SCALE_DENOMINATOR;
        if (s < FLT_MIN) s = FLT_MIN; /* a normal float: 1/s_l and x / s_l stay finite longer */
    }
    *latent_scale = s;
    return MLAKV_OK;
}
