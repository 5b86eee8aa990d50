/* Split-KV combine: merges the fp32 partials (O_i normalized, natural-log lse_i) of every
 * query row and head into the bf16 output and fp32 lse:
 *   O = sum_i O_i exp(lse_i - M) / (sum_i exp(lse_i - M) + exp(sink - M)),
 * M the largest of the lse_i and the sink; partials with lse -inf are skipped (never read). */
#include <math.h>

#include "cuda/decode/config.h"
#include "cuda/decode/params.h"

#define COMBINE_THREADS 128 /* 4 value dims per thread */

__global__ void __launch_bounds__(COMBINE_THREADS) mlakv_decode_combine_kernel(const mlakv_decode_params p) {
    const int64_t rows = (int64_t)p.batch * p.s_q * p.heads;
    const int64_t row = blockIdx.x;
    const int h = (int)(row % p.heads);
    const int ns = p.nsplit;
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, __ldg(p.part_lse + s * rows + row));
    const float sink = p.sink ? __ldg(p.sink + h) : -INFINITY;
    M = fmaxf(M, sink);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float den = 0.0f;
    if (M != -INFINITY) {
        for (int s = 0; s < ns; s++) {
            const float ls = __ldg(p.part_lse + s * rows + row);
            if (ls == -INFINITY) continue;
            const float w = expf(ls - M);
            den += w;
            const float4 v = __ldg(reinterpret_cast<const float4 *>(p.part_o + (s * rows + row) * MLAKV_DEC_V) + threadIdx.x);
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        }
        if (p.sink) den += expf(sink - M);
    }
    const float inv = den > 0.0f ? 1.0f / den : 0.0f;
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.out + row * MLAKV_DEC_V) + 2 * threadIdx.x;
    dst[0] = lo;
    dst[1] = hi;
    if (threadIdx.x == 0) p.lse[row] = den > 0.0f ? M + logf(den) : -INFINITY;
}

cudaError_t mlakv_decode_launch_combine(const mlakv_decode_params *p, cudaStream_t s) {
    const int64_t rows = (int64_t)p->batch * p->s_q * p->heads;
    mlakv_decode_combine_kernel<<<(unsigned)rows, COMBINE_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}
