/* The optional out-of-range index counter of the CUDA sparse decode. The decode kernels treat
 * an index >= capacity as invalid (never read); a caller who passes
 * mlakv_decode_args.invalid_index_count gets their number added to it by this separate
 * kernel, launched before the decode kernel only when asked for, so the decode kernels and
 * their speed are the same with or without the counter. Only active candidates count: the
 * first min(lengths[b], topk) of each query row (all topk without lengths). */
#include <stdint.h>

#include "cuda/decode/launchers.h"

namespace mlakv::decode {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
count_invalid_indices(const int32_t *__restrict__ indices, int64_t i_sb, int64_t i_st,
                      const int32_t *__restrict__ lengths, int batch, int s_q, int topk,
                      int64_t capacity, unsigned long long *__restrict__ count) {
    const int64_t rows = (int64_t)batch * s_q;
    unsigned int mine = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int b = (int)(r / s_q), t = (int)(r % s_q);
        int len = topk;
        if (lengths) len = min(max(__ldg(lengths + b), 0), topk);
        const int32_t *row = indices + b * i_sb + t * i_st;
        for (int k = threadIdx.x; k < len; k += kThreads) mine += (int64_t)__ldg(row + k) >= capacity;
    }
    const unsigned int warp_sum = __reduce_add_sync(0xffffffffu, mine);
    if ((threadIdx.x & 31) == 0 && warp_sum != 0) atomicAdd(count, (unsigned long long)warp_sum);
}

} // namespace

cudaError_t launch_count_invalid(const Params *p,
                                 unsigned long long *count, cudaStream_t s) {
    const int64_t rows = (int64_t)p->batch * p->s_q;
    const int grid = (int)(rows < 4096 ? rows : 4096);
    count_invalid_indices<<<grid, kThreads, 0, s>>>(p->indices, p->i_sb, p->i_st, p->lengths,
                                                    p->batch, p->s_q, p->topk, p->capacity,
                                                    count);
    return cudaGetLastError();
}

} // namespace mlakv::decode
