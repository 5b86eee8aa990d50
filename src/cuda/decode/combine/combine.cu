/* Split-KV combine: merges the fp32 partials (O_i normalized, natural-log lse_i) of every
 * query row and head into the bf16 output and fp32 lse:
 *   O = sum_i O_i exp(lse_i - M) / (sum_i exp(lse_i - M) + exp(sink - M)),
 * M the largest of the lse_i and the sink; partials with lse -inf get weight 0 and are never
 * multiplied (they may be loaded early, unwritten). Up to kCombineRowSplits splits: one warp
 * per row (combine_rows_kernel); more: one CTA per (row, quarter of the 512 value
 * dims), its 8 warps taking the splits round robin (each lane 4 dims). */
#include <math.h>

#include "cuda/common/launch.cuh"
#include "cuda/decode/config.h"
#include "cuda/decode/launchers.h"
#include "cuda/decode/params.h"

namespace mlakv::decode {

constexpr int kCombineWarps = 8;
constexpr int kCombinePre = 4; /* splits per warp loaded before the weights */

template <bool PRE>
__global__ void __launch_bounds__(kCombineWarps * 32)
    combine_quarters_kernel(const Params p) {
    __shared__ float w_s[kMaxSplits];
    __shared__ float red[kCombineWarps];
    __shared__ float4 acc_s[kCombineWarps][32];
    const int64_t rows = (int64_t)p.batch * p.s_q * p.heads;
    const int64_t row = blockIdx.x;
    const int quarter = blockIdx.y;
    const int h = (int)(row % p.heads);
    const int ns = p.nsplit, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* decode grid done, partials visible */
#endif
    /* PRE (many splits: small batch, latency-bound): the partials of this warp's first
     * kCombinePre splits (warp, warp + 8, ...) are loaded together with the lse values instead
     * of after the weights are known, one L2 round trip fewer on the critical path (b=1 h=16:
     * -0.8 us). With few splits (large batch: many CTAs, throughput-bound) that measured
     * slower (b=64 h=32, 2 splits: +5.8 us), so the launcher picks PRE by the split count. */
    const float4 *po = reinterpret_cast<const float4 *>(p.part_o + row * kVDim) + quarter * 32 + lane;
    const int64_t sstride = rows * (kVDim / 4);
    float4 v[kCombinePre];
#pragma unroll
    for (int k = 0; k < kCombinePre; k++) {
        const int s = warp + kCombineWarps * k;
        v[k] = PRE && s < ns ? __ldg(po + s * sstride) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* M = max(lse_i, sink) */
    float ls = tid < ns ? __ldg(p.part_lse + tid * rows + row) : -INFINITY;
    float m = ls;
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    const float sink = p.sink ? __ldg(p.sink + h) : -INFINITY;
    float M = sink;
    for (int i = 0; i < kCombineWarps; i++) M = fmaxf(M, red[i]);
    /* weights of the splits (0 for empty partials) and their sum */
    float w = (M != -INFINITY && ls != -INFINITY) ? expf(ls - M) : 0.0f;
    if (tid < ns) w_s[tid] = w;
    float sum = w;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    __syncthreads();
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    float den = (p.sink && M != -INFINITY) ? expf(sink - M) : 0.0f;
    for (int i = 0; i < kCombineWarps; i++) den += red[i];

    /* weighted sum; an empty partial (weight 0) is never multiplied */
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    auto add = [&](float ws, const float4 &x) {
        if (ws != 0.0f) {
            acc.x += ws * x.x;
            acc.y += ws * x.y;
            acc.z += ws * x.z;
            acc.w += ws * x.w;
        }
    };
    int s0 = warp;
    if constexpr (PRE) {
#pragma unroll
        for (int k = 0; k < kCombinePre; k++) {
            const int s = warp + kCombineWarps * k;
            add(s < ns ? w_s[s] : 0.0f, v[k]);
        }
        s0 = warp + kCombineWarps * kCombinePre;
    }
#pragma unroll 4
    for (int s = s0; s < ns; s += kCombineWarps) {
        const float ws = w_s[s];
        if (ws != 0.0f) add(ws, __ldg(po + s * sstride));
    }
    acc_s[warp][lane] = acc;
    __syncthreads();
    if (warp == 0) {
        float4 t = acc_s[0][lane];
        for (int i = 1; i < kCombineWarps; i++) {
            t.x += acc_s[i][lane].x;
            t.y += acc_s[i][lane].y;
            t.z += acc_s[i][lane].z;
            t.w += acc_s[i][lane].w;
        }
        const float inv = den > 0.0f ? 1.0f / den : 0.0f;
        __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.out + row * kVDim + quarter * 128) + 2 * lane;
        dst[0] = __floats2bfloat162_rn(t.x * inv, t.y * inv);
        dst[1] = __floats2bfloat162_rn(t.z * inv, t.w * inv);
        if (quarter == 0 && lane == 0) p.lse[row] = den > 0.0f ? M + logf(den) : -INFINITY;
    }
}

/* Few splits (<= kCombineRowSplits; large batches): one warp per row and head, all 512 dims
 * (lane: dims 4 lane + 128 k, k < 4). The lse values and the first kCombinePre splits' partials
 * are requested together, the reductions are warp shuffles, and there is no __syncthreads: the
 * CTA-per-quarter kernel above spends three barriers and two dependent L2 round trips on 2..8
 * splits, with 6 of its 8 warps idle at 2 splits (b=64 h=16: 9.6 us of a 49 us decode call). */
__global__ void __launch_bounds__(kCombineWarps * 32)
    combine_rows_kernel(const Params p) {
    const int64_t rows = (int64_t)p.batch * p.s_q * p.heads;
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kCombineWarps + (threadIdx.x >> 5);
    const int ns = p.nsplit;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* decode grid done, partials visible */
#endif
    if (row >= rows) return; /* whole warps; nothing below synchronizes the CTA */
    const int h = (int)(row % p.heads);
    const float4 *po = reinterpret_cast<const float4 *>(p.part_o + row * kVDim) + lane;
    const int64_t sstride = rows * (kVDim / 4);
    /* partials of splits s0 .. s0 + kCombinePre - 1 (an empty one is loaded, never used) */
    float4 v[kCombinePre][4];
    auto load = [&](int s0) {
#pragma unroll
        for (int j = 0; j < kCombinePre; j++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                v[j][k] = s0 + j < ns ? __ldg(po + (s0 + j) * sstride + 32 * k) : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    load(0);
    const float ls = lane < ns ? __ldg(p.part_lse + lane * rows + row) : -INFINITY;
    const float sink = p.sink ? __ldg(p.sink + h) : -INFINITY;
    float M = ls;
    for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    M = fmaxf(M, sink);
    const float w = (M != -INFINITY && ls != -INFINITY) ? expf(ls - M) : 0.0f; /* lane s: split s */
    float den = w;
    for (int off = 16; off > 0; off >>= 1) den += __shfl_xor_sync(0xffffffffu, den, off);
    if (p.sink && M != -INFINITY) den += expf(sink - M);
    float4 acc[4];
#pragma unroll
    for (int k = 0; k < 4; k++) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < ns; s0 += kCombinePre) {
        if (s0 > 0) load(s0);
#pragma unroll
        for (int j = 0; j < kCombinePre; j++) {
            const float ws = __shfl_sync(0xffffffffu, w, (s0 + j) & 31);
            if (s0 + j < ns && ws != 0.0f) /* an empty partial (weight 0) is never multiplied */
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    acc[k].x += ws * v[j][k].x;
                    acc[k].y += ws * v[j][k].y;
                    acc[k].z += ws * v[j][k].z;
                    acc[k].w += ws * v[j][k].w;
                }
        }
    }
    const float inv = den > 0.0f ? 1.0f / den : 0.0f;
    __nv_bfloat162 *dst = reinterpret_cast<__nv_bfloat162 *>(p.out + row * kVDim) + 2 * lane;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        dst[64 * k] = __floats2bfloat162_rn(acc[k].x * inv, acc[k].y * inv);
        dst[64 * k + 1] = __floats2bfloat162_rn(acc[k].z * inv, acc[k].w * inv);
    }
    if (lane == 0) p.lse[row] = den > 0.0f ? M + logf(den) : -INFINITY;
}

cudaError_t launch_combine(const Params *p, bool by_rows,
                           cudaStream_t s) {
    const int64_t rows = (int64_t)p->batch * p->s_q * p->heads;
    /* programmatic dependent launch: the combine grid is set up while the decode grid drains
     * (griddepcontrol.wait in the kernel orders it after the decode grid's memory) */
    if (by_rows && p->nsplit <= kCombineRowSplits)
        return cuda::launch_pdl(combine_rows_kernel,
                          dim3((unsigned)((rows + kCombineWarps - 1) / kCombineWarps)),
                          dim3(kCombineWarps * 32), 0, s, p);
    auto k = p->nsplit > 2 * kCombineWarps ? combine_quarters_kernel<true>
                                           : combine_quarters_kernel<false>;
    return cuda::launch_pdl(k, dim3((unsigned)rows, 4), dim3(kCombineWarps * 32), 0, s, p);
}

} // namespace mlakv::decode
