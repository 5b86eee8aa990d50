/* Decode context parallelism on the CPU: the mapping of a step's global top-k token positions
 * to one rank's local slots (the merge of the ranks' partials is mlakv_merge_partials). */
#include "dcp/dcp.h"

#include <limits.h>
#include <string.h>

#include "cache/cache.h"
#include "common/status.h"
#include "core/validate.h"

mlakv_status mlakv_dcp_check(const char *fn, const mlakv_cache *cache, int rank, int world,
                             int64_t batch, int64_t s_q, int64_t topk, const int32_t *positions,
                             int64_t positions_stride_batch, int64_t positions_stride_token,
                             const int32_t *block_table, int64_t block_table_stride,
                             const int32_t *local_indices, const int32_t *lengths,
                             const void *counter) {
    MLAKV_CHECK_NOT_NULL(fn, cache);
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    if (world < 1 || rank < 0 || rank >= world)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: rank %d / world %d: need 0 <= rank < world",
                          fn, rank, world);
    if (batch < 1 || s_q < 1 || topk < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: batch, s_q and topk must be >= 1 (got %lld, %lld, %lld)",
                          fn, (long long)batch, (long long)s_q, (long long)topk);
    if (batch > INT_MAX || s_q > INT_MAX || topk > INT_MAX / 2 || batch * s_q > INT_MAX ||
        (batch * s_q) > INT64_MAX / topk)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: batch * s_q * topk too large", fn);
    if (mlakv_cache_capacity(cache) > INT32_MAX)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: cache capacity %lld exceeds int32 slots", fn,
                          (long long)mlakv_cache_capacity(cache));
    MLAKV_CHECK_NOT_NULL(fn, positions);
    MLAKV_CHECK_NOT_NULL(fn, block_table);
    MLAKV_CHECK_NOT_NULL(fn, local_indices);
    if (block_table_stride < 1)
        return mlakv_fail(MLAKV_ERR_STRIDE, "%s: block_table_stride %lld < 1", fn,
                          (long long)block_table_stride);
    /* the decoder's stride rules, through a decode shape with one head */
    mlakv_decode_args a = mlakv_decode_args_default(batch, s_q, 1, topk);
    a.indices_stride_batch = positions_stride_batch;
    a.indices_stride_token = positions_stride_token;
    MLAKV_TRY(mlakv_check_decode_strides(fn, &a));
    if (block_table_stride > INT64_MAX / batch)
        return mlakv_fail(MLAKV_ERR_OVERFLOW, "%s: block_table extent overflows", fn);
    if ((uintptr_t)positions % 4 || (uintptr_t)block_table % 4 || (uintptr_t)local_indices % 4 ||
        (uintptr_t)lengths % 4 || (uintptr_t)counter % 8)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT,
                          "%s: positions, block_table, local_indices, lengths must be 4-byte "
                          "aligned, the counter 8-byte", fn);
    const uint64_t pos_n = (uint64_t)(batch - 1) * (uint64_t)positions_stride_batch +
                           (uint64_t)(s_q - 1) * (uint64_t)positions_stride_token + (uint64_t)topk;
    const mlakv_span ins[2] = {
        mlakv_span_of("positions", positions, pos_n * 4),
        mlakv_span_of("block_table", block_table, (uint64_t)batch * (uint64_t)block_table_stride * 4),
    };
    const mlakv_span outs[3] = {
        mlakv_span_of("local_indices", local_indices, (uint64_t)(batch * s_q * topk) * 4),
        mlakv_span_of("lengths", lengths, (uint64_t)batch * 4),
        mlakv_span_of("invalid_count", counter, 8),
    };
    return mlakv_check_overlap(fn, outs, 3, ins, 2);
}

/* The local slot of position p of batch row b, -1 when p is not this rank's, -2 when it is but
 * lies outside the block table's row or the cache. */
static int64_t local_slot(const mlakv_cache *c, int rank, int world, int32_t p,
                          const int32_t *bt_row, int64_t bt_stride) {
    if (p < 0 || p % world != rank) return -1;
    const int64_t lp = p / world, blk = lp / c->block_size;
    if (blk >= bt_stride) return -2;
    const int32_t id = bt_row[blk];
    if (id < 0 || id >= c->num_blocks) return -2;
    return (int64_t)id * c->block_size + lp % c->block_size;
}

mlakv_status mlakv_dcp_local_indices(const mlakv_cache *local_cache, int rank, int world,
                                     int64_t batch, int64_t s_q, int64_t topk,
                                     const int32_t *positions, int64_t positions_stride_batch,
                                     int64_t positions_stride_token, const int32_t *block_table,
                                     int64_t block_table_stride, int32_t *local_indices,
                                     int32_t *lengths) {
    static const char fn[] = "mlakv_dcp_local_indices";
    MLAKV_TRY(mlakv_dcp_check(fn, local_cache, rank, world, batch, s_q, topk, positions,
                              positions_stride_batch, positions_stride_token, block_table,
                              block_table_stride, local_indices, lengths, NULL));
    /* every position is checked before anything is written */
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < s_q; t++) {
            const int32_t *row = positions + b * positions_stride_batch + t * positions_stride_token;
            for (int64_t k = 0; k < topk; k++)
                if (local_slot(local_cache, rank, world, row[k], block_table + b * block_table_stride,
                               block_table_stride) == -2)
                    return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                                      "%s: position %d (batch row %lld) is rank %d's local "
                                      "position %d, outside its block table (%lld blocks of %lld) "
                                      "or the cache (%lld blocks); nothing written",
                                      fn, row[k], (long long)b, rank, row[k] / world,
                                      (long long)block_table_stride,
                                      (long long)local_cache->block_size,
                                      (long long)local_cache->num_blocks);
        }
    for (int64_t b = 0; b < batch; b++) {
        int32_t most = 0;
        for (int64_t t = 0; t < s_q; t++) {
            const int32_t *row = positions + b * positions_stride_batch + t * positions_stride_token;
            int32_t *dst = local_indices + (b * s_q + t) * topk;
            int32_t n = 0;
            for (int64_t k = 0; k < topk; k++) {
                const int64_t s = local_slot(local_cache, rank, world, row[k],
                                             block_table + b * block_table_stride, block_table_stride);
                if (s >= 0) dst[n++] = (int32_t)s;
            }
            if (n > most) most = n;
            for (int64_t k = n; k < topk; k++) dst[k] = -1;
        }
        if (lengths) lengths[b] = most;
    }
    return MLAKV_OK;
}
