/* The paged-cache descriptor: validation and sizing. */
#include "cache/cache.h"

#include "common/status.h"
#include "core/validate.h"

/* Checks geometry and computes the spanned bytes; base is not looked at. */
static mlakv_status check_geometry(const char *fn, mlakv_format format, int64_t num_blocks,
                                   int64_t block_size, int64_t block_stride_bytes,
                                   int64_t *stride_out, size_t *bytes_out) {
    size_t rec = mlakv_record_bytes(format);
    if (rec == 0) return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)format);
    if (num_blocks < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: num_blocks is %lld, must be >= 1", fn,
                          (long long)num_blocks);
    if (block_size < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: block_size is %lld, must be >= 1", fn,
                          (long long)block_size);
    if (block_size > INT64_MAX / (int64_t)rec)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: block_size %lld * %zu B overflows", fn,
                          (long long)block_size, rec);
    int64_t dense = block_size * (int64_t)rec;
    int64_t stride = block_stride_bytes == 0 ? dense : block_stride_bytes;
    if (stride < dense)
        return mlakv_fail(MLAKV_ERR_STRIDE,
                          "%s: block_stride_bytes %lld < block_size %lld * record %zu B = %lld",
                          fn, (long long)block_stride_bytes, (long long)block_size, rec,
                          (long long)dense);
    if (num_blocks > INT64_MAX / stride || (uint64_t)(num_blocks * stride) > (uint64_t)SIZE_MAX)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: %lld blocks * %lld B overflows", fn,
                          (long long)num_blocks, (long long)stride);
    if (stride_out) *stride_out = stride;
    if (bytes_out) *bytes_out = (size_t)(num_blocks * stride);
    return MLAKV_OK;
}

mlakv_status mlakv_cache_bytes(mlakv_format format, int64_t num_blocks, int64_t block_size,
                               int64_t block_stride_bytes, size_t *bytes) {
    MLAKV_CHECK_NOT_NULL("mlakv_cache_bytes", bytes);
    return check_geometry("mlakv_cache_bytes", format, num_blocks, block_size, block_stride_bytes,
                          NULL, bytes);
}

mlakv_status mlakv_cache_init(mlakv_cache *cache, void *base, mlakv_format format,
                              int64_t num_blocks, int64_t block_size, int64_t block_stride_bytes) {
    static const char fn[] = "mlakv_cache_init";
    MLAKV_CHECK_NOT_NULL(fn, cache);
    MLAKV_CHECK_NOT_NULL(fn, base);
    int64_t stride = 0;
    MLAKV_TRY(check_geometry(fn, format, num_blocks, block_size, block_stride_bytes, &stride, NULL));
    cache->base = base;
    cache->format = format;
    cache->num_blocks = num_blocks;
    cache->block_size = block_size;
    cache->block_stride_bytes = stride;
    cache->latent_scale = 1.0f;
    return MLAKV_OK;
}

mlakv_status mlakv_cache_check(const char *fn, const mlakv_cache *cache) {
    MLAKV_CHECK_NOT_NULL(fn, cache);
    if (cache->base == NULL) return mlakv_fail(MLAKV_ERR_NULL_POINTER, "%s: cache->base is NULL", fn);
    if (cache->block_stride_bytes == 0)
        return mlakv_fail(MLAKV_ERR_STRIDE,
                          "%s: cache->block_stride_bytes is 0 (mlakv_cache_init fills it)", fn);
    MLAKV_TRY(check_geometry(fn, cache->format, cache->num_blocks, cache->block_size,
                             cache->block_stride_bytes, NULL, NULL));
    return mlakv_check_latent_scale(fn, cache->format, cache->latent_scale);
}

mlakv_status mlakv_cache_validate(const mlakv_cache *cache) {
    return mlakv_cache_check("mlakv_cache_validate", cache);
}

mlakv_status mlakv_cache_set_latent_scale(mlakv_cache *cache, float latent_scale) {
    static const char fn[] = "mlakv_cache_set_latent_scale";
    MLAKV_CHECK_NOT_NULL(fn, cache);
    /* the descriptor's own checks, with the new value in place of its current one */
    mlakv_cache c = *cache;
    c.latent_scale = latent_scale;
    MLAKV_TRY(mlakv_cache_check(fn, &c));
    cache->latent_scale = latent_scale;
    return MLAKV_OK;
}

int64_t mlakv_cache_capacity(const mlakv_cache *cache) {
    if (cache == NULL || mlakv_cache_check("mlakv_cache_capacity", cache) != MLAKV_OK) return 0;
    if (cache->num_blocks > INT64_MAX / cache->block_size) return 0;
    return cache->num_blocks * cache->block_size;
}
