/* Internal: paged-cache address arithmetic shared by the CPU paths. */
#ifndef MLAKV_CACHE_CACHE_H
#define MLAKV_CACHE_CACHE_H

#include "mlakv.h"

/* Byte offset of flat slot s (0 <= s < capacity) from cache->base. 64-bit throughout. */
static inline int64_t mlakv_slot_offset(const mlakv_cache *cache, int64_t slot,
                                        int64_t record_bytes) {
    return (slot / cache->block_size) * cache->block_stride_bytes +
           (slot % cache->block_size) * record_bytes;
}

/* mlakv_cache_validate with the caller's name in the message. */
mlakv_status mlakv_cache_check(const char *fn, const mlakv_cache *cache);

#endif
