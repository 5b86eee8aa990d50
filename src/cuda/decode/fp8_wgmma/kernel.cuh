/* The fp8_ds_mla record's wgmma kernel (sm_90a), used for 33..128 heads on cc 9.x devices
 * (numerics identical to the mma.sync kernel's engine mode).
 *
 * One CTA = one query row (b, t), a block of 64 heads (rows past `heads` are zero queries,
 * never written) and one split of the candidate list; 2 warpgroups (256 threads). Per tile of
 * NK = 64 candidates:
 *   1. all threads de-quantize the tile's records (gathered earlier with cp.async) into a bf16
 *      K tile [64 x 576] laid out in the wgmma canonical 128-byte-swizzled form (nine 64-column
 *      blocks of 64 rows x 128 B, 16-byte chunk c of row r at chunk c ^ (r & 7)), then
 *      fence.proxy.async + barrier;
 *   2. warpgroup w computes S_w = Q K[32w .. 32w+32)^T with wgmma m64n32k16 (Q [64 x 576] in
 *      the same swizzled form, loaded once; both operands K-major from shared memory);
 *   3. online softmax on the accumulator fragments (fp32, log2 domain): row maxima exchanged
 *      between the two warpgroups through shared memory, P rounded to bf16 and stored into a
 *      swizzled [64 x 64] tile, each warpgroup keeping the row sums of its own 32 columns;
 *   4. warpgroup w computes O[:, 256w .. 256w+256) += P V with wgmma m64n256k16, A = P from
 *      shared memory, B = V = the same K tile's first 512 columns read MN-major (transpose
 *      bit), so one de-quantized tile serves both products. O: 128 fp32 registers per thread.
 * The result goes out directly (one split) or as an fp32 partial for the combine kernel, in the
 * same formats as the mma.sync kernel. */
#ifndef MLAKV_CUDA_DECODE_FP8_WGMMA_KERNEL_CUH
#define MLAKV_CUDA_DECODE_FP8_WGMMA_KERNEL_CUH

#include "cuda/common/launch.cuh"
#include "cuda/decode/common/sm90.cuh"
#include "cuda/decode/fp8_wgmma/config.h"

namespace mlakv::decode::fp8_wgmma {

template <int FMT>
__global__ void __launch_bounds__(kThreads, 1)
    kernel(const Params p) {
#ifdef MLAKV_SM90A_DEVICE
    typedef Shape<FMT> SH;
    constexpr int NK = SH::NK, ST = SH::ST, HP = SH::HP, REC = SH::REC;
    constexpr int NT = kThreads;

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    uint8_t *Ps = Ks + SH::K_BYTES;
    uint8_t *raw = Ps + SH::P_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *valid = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    float *red_m = reinterpret_cast<float *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES + SH::VALID_BYTES);
    float *red_l = red_m + 2 * HP;

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127; /* warpgroup, thread in it */
    const int bt = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;

    const TilePipeline<NK, ST, REC, NT> g = {p, idx_row, cbeg, cend, ntiles,
                                             tid, raw, addr, valid};

    int idx_reg = -1, idx_pre[ST];
    g.first_indices(idx_pre);
    /* Q [64 heads x 576] into nine swizzled 64-column blocks */
    load_q<HP, NT, false>(p, b, t, h0, tid, [&](int r, int j) {
        return Qs + (j >> 3) * (HP * 128) + sw128(r, j & 7);
    });
    g.fill(idx_pre);
    if (tid < NK) idx_reg = g.load_idx(ST);

    /* accumulator fragment: rows r0 = 16 * warp + lane / 4 and r0 + 8 of the warpgroup's 64,
     * columns 8 j + 2 (lane % 4) + {0, 1} */
    const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
    float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.0f;

    const uint32_t qs_a = smem_addr(Qs), ks_a = smem_addr(Ks), ps_a = smem_addr(Ps);

    for (int it = 0; it < ntiles; ++it) {
        cp_async_wait<ST - 1>();
        __syncthreads(); /* raw tile `it` landed; previous P V (both warpgroups) done */

        {
            constexpr int TPR = NT / NK;
            const int key = tid / TPR;
            dequant_swizzled<FMT, TPR, NK>(raw + (it % ST) * NK * REC + key * REC,
                                           valid[(it % (ST + 1)) * NK + key] != 0, Ks, key,
                                           tid % TPR);
        }
        g.advance(it, idx_reg);
        fence_proxy_async(); /* K tile (and Q, first time) visible to the tensor cores */
        __syncthreads();
        g.issue(it + ST);

        /* 2. S_w [64 heads x 32 candidates] */
        float s[16];
#pragma unroll
        for (int i = 0; i < 16; i++) s[i] = 0.0f;
        wgmma_fence();
        {
            /* base descriptors once; per k-step only the start address moves (constant adds) */
            const uint32_t dq0 = wgmma_desc_lo(qs_a, 16), dk0 = wgmma_desc_lo(ks_a + wg * 32 * 128, 16);
            const uint32_t dhi = wgmma_desc_hi(1024);
#pragma unroll
            for (int kk = 0; kk < 36; kk++) {
                const uint32_t off_q = ((kk >> 2) * (HP * 128) + (kk & 3) * 32) >> 4;
                const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                wgmma_m64n32(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
            }
        }
        wgmma_commit();
        wgmma_wait0();
        reg_fence(s);

        /* 3. online softmax */
        float al0, al1;
        softmax_2wg<4, 0>(p, s, valid + (it % (ST + 1)) * NK + wg * 32, wg, lane, r0, cq,
                          red_m, Ps, m_run0, m_run1, l_run0, l_run1, al0, al1);
        fence_proxy_async();
        __syncthreads(); /* P tile complete (both halves) */

        /* 4. O = O * alpha + P V[:, 256 wg .. 256 wg + 256) */
        accumulate_pv<NK>(o, al0, al1, ps_a, ks_a + wg * 4 * (NK * 128));
    }
    cp_async_wait<0>();

    /* finalize: total row sums = both warpgroups' halves */
    finish_rows<0>(p, o, red_l, wg, lane, r0, cq, h0, bt, split, m_run0, m_run1, l_run0,
                   l_run1);
#endif /* MLAKV_SM90A_DEVICE */
}

/* The fp8_ds_mla record's wgmma kernel (33..128 heads, 64-head blocks). */
static inline cudaError_t launch(const Params *p,
                                 cudaStream_t stream) {
    if (p->head_groups != kMaxHeadGroups) return cudaErrorInvalidValue; /* 64-head blocks */
    dim3 grid((unsigned)(p->batch * p->s_q), (unsigned)p->head_blocks, (unsigned)p->nsplit);
    const size_t sm = Shape<0>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(kernel<0>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    return launch_pdl(kernel<0>, grid, dim3(kThreads), sm,
                      stream, p);
}

} // namespace mlakv::decode::fp8_wgmma

#endif
