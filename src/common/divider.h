/* Division of a record index n (0 <= n < 2^31) by a block size without a divide instruction:
 * Granlund and Montgomery's round-up multiplier, exact for every 32-bit n. The CUDA decode
 * kernels call mlakv_divider_apply (cuda/decode/common/gather.cuh), where it replaces a
 * ~20-instruction division on every record load; tests/test_divider.c checks it on the CPU. */
#ifndef MLAKV_COMMON_DIVIDER_H
#define MLAKV_COMMON_DIVIDER_H

#include <stdint.h>

typedef struct {
    uint32_t mul;
    int s1, s2;
} mlakv_divider;

/* d >= 1; a d above 2^31 - 1 puts every n < 2^31 in block 0 */
static inline mlakv_divider mlakv_divider_make(int64_t d) {
    mlakv_divider v = {0u, 0, 31}; /* t = 0, n >> 31 = 0 */
    if (d < 1 || d > 0x7FFFFFFF) return v;
    int l = 0;
    while ((1ull << l) < (uint64_t)d) l++; /* ceil(log2 d) */
    v.mul = (uint32_t)(((((1ull << l) - (uint64_t)d)) << 32) / (uint64_t)d + 1u);
    v.s1 = l > 0 ? 1 : 0;
    v.s2 = l > 0 ? l - 1 : 0;
    return v;
}

#ifdef __CUDACC__
#define MLAKV_DIVIDER_FN __host__ __device__ static inline
#else
#define MLAKV_DIVIDER_FN static inline
#endif

/* n / d for the d of mlakv_divider_make */
MLAKV_DIVIDER_FN uint32_t mlakv_divider_apply(mlakv_divider v, uint32_t n) {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, v.mul);
#else
    const uint32_t t = (uint32_t)(((uint64_t)n * v.mul) >> 32);
#endif
    return (t + ((n - t) >> v.s1)) >> v.s2;
}

#endif
