/* CPU writer: rows of kv_c / k_pe -> records at their slots, through the scalar reference
 * codec. All slots are validated before the first byte is written, so a failed call changes
 * nothing. A latent scale s_l != 1 (mlakv_cache.latent_scale) is applied first: the codec sees
 * bf16(x / s_l) (fp32 division, round to nearest even); s_l == 1 skips it, so the bytes are
 * exactly the unscaled writer's. The reader multiplies by s_l again. */
#include <string.h>

#include "cache/cache.h"
#include "common/status.h"
#include "core/validate.h"
#include "format/format.h"
#include "format/scalar.h"

mlakv_status mlakv_write(const mlakv_cache *cache, int64_t n, const void *kv_c,
                         int64_t kv_c_row_stride, const void *k_pe, int64_t k_pe_row_stride,
                         mlakv_dtype dtype, const int64_t *slot_mapping,
                         const mlakv_write_options *options) {
    static const char fn[] = "mlakv_write";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (n < 0) return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n is %lld, must be >= 0", fn, (long long)n);
    MLAKV_TRY(mlakv_check_rows(fn, "kv_c", kv_c, n, MLAKV_LATENT_DIM, kv_c_row_stride, dtype));
    MLAKV_TRY(mlakv_check_rows(fn, "k_pe", k_pe, n, MLAKV_ROPE_DIM, k_pe_row_stride, dtype));
    MLAKV_TRY(mlakv_check_write_options(fn, options));
    if (n == 0) return MLAKV_OK;
    MLAKV_CHECK_NOT_NULL(fn, slot_mapping);
    if ((uintptr_t)slot_mapping % sizeof(int64_t) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: slot_mapping is not 8-byte aligned", fn);
    /* the slots are read twice (checked, then used): with slot_mapping or an input row inside
     * the cache, a record written early could change what is read later */
    MLAKV_TRY(mlakv_check_write_aliasing(fn, cache, n, kv_c, kv_c_row_stride, k_pe,
                                         k_pe_row_stride, dtype, slot_mapping, NULL));

    int64_t capacity = mlakv_cache_capacity(cache);
    for (int64_t i = 0; i < n; i++) {
        if (slot_mapping[i] >= capacity)
            return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                              "%s: slot_mapping[%lld] = %lld >= cache capacity %lld; nothing written",
                              fn, (long long)i, (long long)slot_mapping[i], (long long)capacity);
    }

    const mlakv_format_traits *t = mlakv_format_traits_get(cache->format);
    const int64_t rec = (int64_t)t->info.record_bytes;
    unsigned char *base = (unsigned char *)cache->base;
    const float s_l = cache->latent_scale;
    float latent[MLAKV_LATENT_DIM], rope[MLAKV_ROPE_DIM];
    for (int64_t i = 0; i < n; i++) {
        int64_t slot = slot_mapping[i];
        if (slot < 0) continue; /* padded token */
        for (int j = 0; j < MLAKV_LATENT_DIM; j++)
            latent[j] = mlakv_load_as_f32(kv_c, dtype, i * kv_c_row_stride + j);
        if (s_l != 1.0f)
            for (int j = 0; j < MLAKV_LATENT_DIM; j++) latent[j] = mlakv_round_bf16(latent[j] / s_l);
        for (int j = 0; j < MLAKV_ROPE_DIM; j++)
            rope[j] = mlakv_load_as_f32(k_pe, dtype, i * k_pe_row_stride + j);
        t->encode(latent, rope, base + mlakv_slot_offset(cache, slot, rec), options);
    }
    return MLAKV_OK;
}

mlakv_status mlakv_read(const mlakv_cache *cache, int64_t n, const int64_t *slots, float *latent,
                        float *rope) {
    static const char fn[] = "mlakv_read";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (n < 0) return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: n is %lld, must be >= 0", fn, (long long)n);
    if (n == 0) return MLAKV_OK;
    MLAKV_CHECK_NOT_NULL(fn, slots);
    if ((uint64_t)n > SIZE_MAX / (MLAKV_LATENT_DIM * sizeof(float)))
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: n = %lld rows overflow", fn, (long long)n);
    if ((uintptr_t)slots % sizeof(int64_t) != 0 || (uintptr_t)latent % sizeof(float) != 0 ||
        (uintptr_t)rope % sizeof(float) != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: slots (8 bytes), latent or rope (4 bytes) not aligned to its "
                          "elements", fn);
    /* the slots are read twice (checked, then used): an output over them or over the cache
     * would change them between the two */
    const mlakv_span outs[2] = {
        mlakv_span_of("latent", latent, (uint64_t)n * MLAKV_LATENT_DIM * sizeof(float)),
        mlakv_span_of("rope", rope, (uint64_t)n * MLAKV_ROPE_DIM * sizeof(float))};
    const mlakv_span ins[2] = {mlakv_span_of("slots", slots, (uint64_t)n * sizeof(int64_t)),
                               mlakv_cache_span(cache)};
    MLAKV_TRY(mlakv_check_overlap(fn, outs, 2, ins, 2));
    int64_t capacity = mlakv_cache_capacity(cache);
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= capacity)
            return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                              "%s: slots[%lld] = %lld outside [0, %lld); nothing written", fn,
                              (long long)i, (long long)slots[i], (long long)capacity);
    }
    const mlakv_format_traits *t = mlakv_format_traits_get(cache->format);
    const int64_t rec = (int64_t)t->info.record_bytes;
    const unsigned char *base = (const unsigned char *)cache->base;
    const float s_l = cache->latent_scale;
    for (int64_t i = 0; i < n; i++) {
        float *lat = latent ? latent + i * MLAKV_LATENT_DIM : NULL;
        t->decode(base + mlakv_slot_offset(cache, slots[i], rec), lat,
                  rope ? rope + i * MLAKV_ROPE_DIM : NULL);
        if (lat && s_l != 1.0f)
            for (int j = 0; j < MLAKV_LATENT_DIM; j++) lat[j] *= s_l;
    }
    return MLAKV_OK;
}
