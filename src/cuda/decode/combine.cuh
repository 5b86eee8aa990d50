/* Split-KV merge of one (query row x head, quarter of the 512 value dims): the body of the
 * combine kernel (combine.cu), also run inside the decode kernel by the fused variants
 * (decode_kernel.cuh, MLAKV_CUDA_DECODE_SMALL=fused|fusedco). Merges the fp32 partials
 * (O_i normalized, natural-log lse_i) into the bf16 output and the fp32 lse:
 *   O = sum_i O_i exp(lse_i - M) / (sum_i exp(lse_i - M) + exp(sink - M)),
 * M the largest of the lse_i and the sink; partials with lse -inf are skipped (never read).
 * All MLAKV_COMBINE_WARPS warps of the CTA must call it (it synchronizes the CTA); the warps
 * take the splits round robin (each lane 4 dims), so loads of many splits are in flight.
 * COHERENT: read the partials with ld.global.cg (L2) instead of the read-only path: they were
 * written by other CTAs of the same grid (fused variants). The arithmetic is the same either
 * way, so the fused and the two-kernel paths give the same bits. */
#ifndef MLAKV_CUDA_DECODE_COMBINE_CUH
#define MLAKV_CUDA_DECODE_COMBINE_CUH

#include <math.h>

#include <cuda_bf16.h>

#include "cuda/decode/config.h"
#include "cuda/decode/params.h"

#define MLAKV_COMBINE_WARPS 8

typedef struct {
    float4 acc_s[MLAKV_COMBINE_WARPS][32];
    float w_s[MLAKV_DEC_MAX_SPLITS];
    float red[MLAKV_COMBINE_WARPS];
} mlakv_combine_smem;

template <bool COHERENT>
__device__ __forceinline__ float mlakv_combine_ldf(const float *p) {
    return COHERENT ? __ldcg(p) : __ldg(p);
}
template <bool COHERENT>
__device__ __forceinline__ float4 mlakv_combine_ldf4(const float4 *p) {
    return COHERENT ? __ldcg(p) : __ldg(p);
}

template <bool COHERENT>
__device__ __forceinline__ void mlakv_combine_piece(const mlakv_decode_params &p, int64_t row,
                                                    int quarter, mlakv_combine_smem &sm) {
    const int64_t rows = (int64_t)p.batch * p.s_q * p.heads;
    const int h = (int)(row % p.heads);
    const int ns = p.nsplit, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* M = max(lse_i, sink) */
    float ls = tid < ns ? mlakv_combine_ldf<COHERENT>(p.part_lse + tid * rows + row) : -INFINITY;
    float m = ls;
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) sm.red[warp] = m;
    __syncthreads();
    const float sink = p.sink ? __ldg(p.sink + h) : -INFINITY;
    float M = sink;
    for (int i = 0; i < MLAKV_COMBINE_WARPS; i++) M = fmaxf(M, sm.red[i]);
    /* weights of the splits (0 for empty partials) and their sum */
    float w = (M != -INFINITY && ls != -INFINITY) ? expf(ls - M) : 0.0f;
    if (tid < ns) sm.w_s[tid] = w;
    float sum = w;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncthreads();
    if (lane == 0) sm.red[warp] = sum;
    __syncthreads();
    float den = (p.sink && M != -INFINITY) ? expf(sink - M) : 0.0f;
    for (int i = 0; i < MLAKV_COMBINE_WARPS; i++) den += sm.red[i];

    /* weighted sum of the partials: warp takes splits warp, warp + 8, ... */
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 *po = reinterpret_cast<const float4 *>(p.part_o + row * MLAKV_DEC_V) + quarter * 32 + lane;
    const int64_t sstride = rows * (MLAKV_DEC_V / 4);
#pragma unroll 4
    for (int s = warp; s < ns; s += MLAKV_COMBINE_WARPS) {
        const float ws = sm.w_s[s];
        if (ws != 0.0f) {
            const float4 v = mlakv_combine_ldf4<COHERENT>(po + s * sstride);
            acc.x += ws * v.x;
            acc.y += ws * v.y;
            acc.z += ws * v.z;
            acc.w += ws * v.w;
        }
    }
    sm.acc_s[warp][lane] = acc;
    __syncthreads();
    if (warp == 0) {
        float4 t = sm.acc_s[0][lane];
        for (int i = 1; i < MLAKV_COMBINE_WARPS; i++) {
            t.x += sm.acc_s[i][lane].x;
            t.y += sm.acc_s[i][lane].y;
            t.z += sm.acc_s[i][lane].z;
            t.w += sm.acc_s[i][lane].w;
        }
        const float inv = den > 0.0f ? 1.0f / den : 0.0f;
        __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.out + row * MLAKV_DEC_V + quarter * 128) + 2 * lane;
        dst[0] = __floats2bfloat162_rn(t.x * inv, t.y * inv);
        dst[1] = __floats2bfloat162_rn(t.z * inv, t.w * inv);
        if (quarter == 0 && lane == 0) p.lse[row] = den > 0.0f ? M + logf(den) : -INFINITY;
    }
}

#endif
