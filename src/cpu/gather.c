/* CPU gathers: records -> bf16 rows [latent 512 ; RoPE 64], each value the round-to-nearest-even
 * bf16 of what the scalar reference decoder (mlakv_read) returns. The reference decoder is
 * called for every record, so the rows are the oracle's by construction; the CUDA gathers are
 * tested against these. Every slot, block id and output row is checked before the first byte is
 * written, so a failed call changes nothing. */
#include <stdint.h>
#include <string.h>

#include "cache/cache.h"
#include "common/status.h"
#include "core/validate.h"
#include "format/format.h"
#include "format/scalar.h"

/* Shared checks of the output: stride (0 = dense), NULL, 64-bit extent, 4-byte alignment. */
static mlakv_status check_out(const char *fn, void *out, int64_t rows, int64_t *stride) {
    if (*stride == 0) *stride = MLAKV_QK_DIM;
    MLAKV_TRY(mlakv_check_rows(fn, "out", out, rows, MLAKV_QK_DIM, *stride, MLAKV_BF16));
    if (rows > 0 && (uintptr_t)out % 4 != 0)
        return mlakv_fail(MLAKV_ERR_ALIGNMENT, "%s: out is not 4-byte aligned", fn);
    return MLAKV_OK;
}

/* One record -> one bf16 row through the reference decoder, the latent times the cache's
 * latent scale s_l in fp32 first (as mlakv_read). */
static void gather_row(const mlakv_format_traits *t, const unsigned char *rec, float s_l,
                       uint16_t *row) {
    float v[MLAKV_QK_DIM];
    t->decode(rec, v, v + MLAKV_LATENT_DIM);
    if (s_l != 1.0f)
        for (int j = 0; j < MLAKV_LATENT_DIM; j++) v[j] *= s_l;
    for (int j = 0; j < MLAKV_QK_DIM; j++) row[j] = mlakv_f32_to_bf16_bits(v[j]);
}

mlakv_status mlakv_gather_bf16(const mlakv_cache *cache, int64_t n, const int32_t *slots,
                               void *out, int64_t out_row_stride) {
    static const char fn[] = "mlakv_gather_bf16";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    MLAKV_TRY(mlakv_check_gather_args(fn, n, slots, out_row_stride));
    if (n == 0) return MLAKV_OK;
    int64_t stride = out_row_stride;
    MLAKV_TRY(check_out(fn, out, n, &stride));
    /* the slots are read twice (checked, then used) and the cache is read while out is
     * written: out may overlap neither */
    MLAKV_TRY(mlakv_check_gather_aliasing(fn, cache, n, slots, out, stride, NULL));

    const int64_t capacity = mlakv_cache_capacity(cache);
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] >= capacity)
            return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                              "%s: slots[%lld] = %d >= cache capacity %lld; nothing written", fn,
                              (long long)i, (int)slots[i], (long long)capacity);
    }
    const mlakv_format_traits *t = mlakv_format_traits_get(cache->format);
    const int64_t rec = (int64_t)t->info.record_bytes;
    const unsigned char *base = (const unsigned char *)cache->base;
    uint16_t *o = (uint16_t *)out;
    for (int64_t i = 0; i < n; i++) {
        uint16_t *row = o + i * stride;
        if (slots[i] < 0)
            memset(row, 0, MLAKV_QK_DIM * sizeof(uint16_t)); /* padding: a zero row */
        else
            gather_row(t, base + mlakv_slot_offset(cache, slots[i], rec), cache->latent_scale, row);
    }
    return MLAKV_OK;
}

mlakv_status mlakv_gather_upconvert(const mlakv_cache *cache, int64_t batch,
                                    const int32_t *block_table, int64_t block_table_stride,
                                    const int32_t *seq_lens, const int32_t *workspace_starts,
                                    const int32_t *seq_starts, void *out, int64_t out_rows,
                                    int64_t out_row_stride) {
    static const char fn[] = "mlakv_gather_upconvert";
    MLAKV_TRY(mlakv_cache_check(fn, cache));
    MLAKV_TRY(mlakv_check_upconvert_args(fn, batch, block_table, block_table_stride, seq_lens,
                                         workspace_starts, seq_starts, out_rows, out_row_stride));
    if (batch == 0) return MLAKV_OK;
    int64_t stride = out_row_stride;
    MLAKV_TRY(check_out(fn, out, out_rows, &stride));
    MLAKV_TRY(mlakv_check_upconvert_aliasing(fn, cache, batch, block_table, block_table_stride,
                                             seq_lens, workspace_starts, seq_starts, out,
                                             out_rows, stride, NULL));

    /* every row, position and block id first: nothing is written unless all are valid */
    const int64_t bs = cache->block_size;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = seq_lens[b], ws = workspace_starts[b];
        const int64_t start = seq_starts ? seq_starts[b] : 0;
        if (len < 0 || start < 0)
            return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                              "%s: batch row %lld has seq_lens %lld, seq_starts %lld (must be "
                              ">= 0); nothing written", fn, (long long)b, (long long)len,
                              (long long)start);
        if (len == 0) continue;
        if (ws < 0 || ws + len > out_rows)
            return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                              "%s: batch row %lld writes out rows [%lld, %lld), outside [0, "
                              "%lld); nothing written", fn, (long long)b, (long long)ws,
                              (long long)(ws + len), (long long)out_rows);
        /* start + len <= 2^32: no overflow; the last position's column must be in the row */
        const int64_t last_col = (start + len - 1) / bs;
        if (last_col >= block_table_stride)
            return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                              "%s: batch row %lld reaches position %lld, past its %lld block "
                              "table columns of %lld tokens; nothing written", fn, (long long)b,
                              (long long)(start + len - 1), (long long)block_table_stride,
                              (long long)bs);
        const int32_t *row = block_table + b * block_table_stride;
        for (int64_t c = start / bs; c <= last_col; c++) {
            if (row[c] < 0 || row[c] >= cache->num_blocks)
                return mlakv_fail(MLAKV_ERR_SLOT_OUT_OF_RANGE,
                                  "%s: block_table[%lld][%lld] = %d outside [0, %lld); nothing "
                                  "written", fn, (long long)b, (long long)c, (int)row[c],
                                  (long long)cache->num_blocks);
        }
    }

    const mlakv_format_traits *t = mlakv_format_traits_get(cache->format);
    const int64_t rec = (int64_t)t->info.record_bytes;
    const unsigned char *base = (const unsigned char *)cache->base;
    uint16_t *o = (uint16_t *)out;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = seq_lens[b], ws = workspace_starts[b];
        const int64_t start = seq_starts ? seq_starts[b] : 0;
        const int32_t *row = block_table + b * block_table_stride;
        for (int64_t i = 0; i < len; i++) {
            const int64_t p = start + i;
            const unsigned char *r =
                base + row[p / bs] * cache->block_stride_bytes + (p % bs) * rec;
            gather_row(t, r, cache->latent_scale, o + (ws + i) * stride);
        }
    }
    return MLAKV_OK;
}
