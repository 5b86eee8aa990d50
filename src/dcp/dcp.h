/* Internal: the argument checks of the DCP index mapping, shared by the CPU entry point and the
 * CUDA one's host side (pointer values only: nothing is dereferenced). */
#ifndef MLAKV_DCP_DCP_H
#define MLAKV_DCP_DCP_H

#include <stdint.h>

#include "mlakv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates everything mlakv_dcp_local_indices takes but the values inside the arrays:
 * the cache, 0 <= rank < world, batch, s_q, topk >= 1 and their product within int32 slot
 * arithmetic, the positions strides (topk contiguous, rows not overlapping), NULLs, 4-byte
 * alignment, and that the outputs (local_indices, lengths, an optional 8-byte counter) overlap
 * no input (positions, block_table) nor each other. */
mlakv_status mlakv_dcp_check(const char *fn, const mlakv_cache *cache, int rank, int world,
                             int64_t batch, int64_t s_q, int64_t topk, const int32_t *positions,
                             int64_t positions_stride_batch, int64_t positions_stride_token,
                             const int32_t *block_table, int64_t block_table_stride,
                             const int32_t *local_indices, const int32_t *lengths,
                             const void *counter);

#ifdef __cplusplus
}
#endif

#endif
