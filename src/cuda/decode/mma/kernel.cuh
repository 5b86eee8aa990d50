/* Kernel body of the sparse MLA decode (included by one small .cu per record format).
 *
 * One CTA computes one query row (b, t), HG*16 heads (rows past `heads` are padding: zero
 * queries, never written) and one split of the candidate list. Per tile of NK candidates:
 *   1. the records of the tile (fetched earlier with cp.async, ST stages deep) are de-quantized
 *      from shared memory into a bf16 K tile [NK][576] (zero rows for invalid candidates);
 *      E2M1 -> bf16 in software with byte permutes (no lookup-table loads), times the E4M3
 *      group scale as a bf16x2 multiply (exact: <= 6 significant bits);
 *   2. S = Q K^T with mma.sync m16n8k16 (bf16 -> fp32), the 36 k-steps split over the warps
 *      (KS = 8/HG warps per head group), partial sums reduced through shared memory;
 *   3. online softmax in fp32 (log2 domain), P rounded to bf16;
 *   4. O += P V with mma.sync, each warp owning 64 of the 512 value dims for all its heads.
 * The same K tile serves every head of the CTA and both products (V = K's first 512 dims).
 * The result is written directly (one split) or as an fp32 partial (O/l, natural-log lse)
 * for the combine kernel. Engine-mode numerics: see src/cpu/attention.c (ENGINE). */
#ifndef MLAKV_CUDA_DECODE_MMA_KERNEL_CUH
#define MLAKV_CUDA_DECODE_MMA_KERNEL_CUH

#include "cuda/common/dequant.cuh"
#include "cuda/common/launch.cuh"
#include "cuda/decode/common/epilogue.cuh"
#include "cuda/decode/common/gather.cuh"
#include "cuda/decode/mma/config.h"

namespace mlakv::decode::mma {

template <int FMT, int HG, bool SC = false>
__global__ void __launch_bounds__(kThreads, Tile<HG>::MINB)
    kernel(const Params p) {
    typedef Shape<FMT, HG> SH;
    constexpr int NK = SH::NK, ST = SH::ST, HP = SH::HP, KS = SH::KS, SPITCH = SH::SPITCH;
    constexpr int REC = SH::REC, KP = kRowPitch;
    constexpr int G = kThreads / HP, C = NK / G; /* softmax: threads and cols per row */
    constexpr int CV = C >= 2 ? 2 : 1;                    /* columns per vector access */
    static_assert(C >= 1 && C % CV == 0, "softmax columns per thread");

    extern __shared__ __align__(16) uint8_t smem[];
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Ks = reinterpret_cast<__nv_bfloat16 *>(smem + SH::Q_BYTES);
    float *Sp = reinterpret_cast<float *>(smem + SH::Q_BYTES + SH::K_BYTES);
    __nv_bfloat16 *Ps = reinterpret_cast<__nv_bfloat16 *>(
        SH::SEP_P ? smem + SH::Q_BYTES + SH::K_BYTES + SH::S_BYTES + SH::RAW_BYTES +
                        SH::ADDR_BYTES + SH::VALID_BYTES + SH::ROW_BYTES
                  : reinterpret_cast<uint8_t *>(Sp));
    uint8_t *raw = smem + SH::Q_BYTES + SH::K_BYTES + SH::S_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *valid = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    float *alpha_s = reinterpret_cast<float *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES +
                                               SH::VALID_BYTES);
    float *m_s = alpha_s + HP, *l_s = m_s + HP;
    float *ts_s = reinterpret_cast<float *>(smem + SH::SMEM - SH::TS_BYTES); /* [NK] (FMT 3) */
    (void)ts_s;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Programmatic dependent launch: wait until the previous kernel in the stream has finished
     * and its memory is visible (it may have produced q or still read the workspace), then let
     * the next one (the combine) be scheduled; it waits for this grid the same way. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int bt = blockIdx.x, hb = blockIdx.y, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;

    const TilePipeline<NK, ST, REC, kThreads> g = {p, idx_row, cbeg, cend, ntiles,
                                                   tid, raw, addr, valid};

    /* prologue: the first indices, then Q (cp.async, part of the first group), then ST tiles
     * in flight; nothing waits on a global load before all of these are issued */
    int idx_reg = -1, idx_pre[ST];
    g.first_indices(idx_pre);
    load_q<HP, kThreads, SC>(p, b, t, h0, tid,
                             [&](int r, int j) { return Qs + r * KP + 8 * j; });
    g.fill(idx_pre);
    if (tid < NK) idx_reg = g.load_idx(ST);

    const int srow = tid / G, sq = tid - srow * G;
    float m_run = -INFINITY, l_run = 0.0f;
    float o[HG][8][4];
#pragma unroll
    for (int g = 0; g < HG; g++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[g][n][i] = 0.0f;

    const int fg = lane >> 2, fc = lane & 3; /* mma fragment row / column pair */

    /* S warp roles: warp = (head group, k-slice) */
    constexpr int NKS = (36 + KS - 1) / KS; /* k-steps per warp (the last may be past 36) */
    const int s_hg = warp / KS, s_kp = warp - s_hg * KS;
    const __nv_bfloat16 *qa = Qs + (s_hg * 16 + (lane & 15)) * KP + (lane >> 4) * 8;

    for (int it = 0; it < ntiles; ++it) {
        cp_async_wait<ST - 1>();
        __syncthreads(); /* raw tile `it` landed; previous P*V done with Ks and Ps */

        /* 1. de-quantize into Ks */
        {
            constexpr int TPR = kThreads / NK; /* threads per record */
            const int key = tid / TPR;
            __nv_bfloat16 *krow = Ks + key * KP;
            const uint8_t *rec = raw + (it % ST) * NK * REC + key * REC;
            const bool ok = valid[(it % (ST + 1)) * NK + key] != 0;
            /* the two-level record: K without its token scale, which goes to ts_s (engine mode) */
            dequant_record<FMT, TPR>(
                rec, ok, tid % TPR,
                [&](int q, uint4 v) { *reinterpret_cast<uint4 *>(krow + 8 * q) = v; });
            if constexpr (FMT == 3) {
                if (tid % TPR == 0) ts_s[key] = ok ? *reinterpret_cast<const float *>(rec + RecordTraits<2>::token_scale_off) : 0.0f;
            }
        }
        g.advance(it, idx_reg);
        __syncthreads(); /* Ks ready, raw stage free, next addresses visible */
        g.issue(it + ST);

        /* 2. S partials: warp = (head group, k-slice) */
        {
            const int hg = s_hg, kp = s_kp;
            float s[NK / 8][4];
#pragma unroll
            for (int n = 0; n < NK / 8; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
            const __nv_bfloat16 *kb = Ks + ((lane & 7) + ((lane >> 4) << 3)) * KP + ((lane >> 3) & 1) * 8;
            /* the two-level record: the latent k-steps (kk < 32), the columns times their token
             * scale, then the RoPE k-steps (pass 1) */
#pragma unroll
            for (int pass = 0; pass < (FMT == 3 ? 2 : 1); pass++) {
                if (FMT == 3 && pass == 1) {
#pragma unroll
                    for (int n = 0; n < NK / 8; n++) {
                        const float2 f = *reinterpret_cast<const float2 *>(ts_s + n * 8 + 2 * fc);
                        s[n][0] *= f.x;
                        s[n][1] *= f.y;
                        s[n][2] *= f.x;
                        s[n][3] *= f.y;
                    }
                }
#pragma unroll
                for (int i = 0; i < NKS; i++) {
                    const int kk = kp + KS * i;
                    if (FMT == 3 ? (pass == 0 ? kk < 32 : kk >= 32 && kk < 36) : kk < 36) {
                        uint32_t a[4];
                        ldsm_x4(a, qa + kk * 16);
#pragma unroll
                        for (int np = 0; np < NK / 16; np++) {
                            uint32_t bb[4];
                            ldsm_x4(bb, kb + np * 16 * KP + kk * 16);
                            mma_m16n8k16(s[2 * np], a, bb[0], bb[1]);
                            mma_m16n8k16(s[2 * np + 1], a, bb[2], bb[3]);
                        }
                    }
                }
            }
            float *dst = Sp + (kp * HP + hg * 16 + fg) * SPITCH + 2 * fc;
#pragma unroll
            for (int n = 0; n < NK / 8; n++) {
                *reinterpret_cast<float2 *>(dst + n * 8) = make_float2(s[n][0], s[n][1]);
                *reinterpret_cast<float2 *>(dst + 8 * SPITCH + n * 8) = make_float2(s[n][2], s[n][3]);
            }
        }
        __syncthreads();

        /* 3. online softmax: row srow, columns [sq*C, sq*C + C) */
        float pr[C];
        float alpha;
        {
            const int *v = valid + (it % (ST + 1)) * NK;
#pragma unroll
            for (int i = 0; i < C; i++) pr[i] = 0.0f;
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const float *src = Sp + (k * HP + srow) * SPITCH + sq * C;
#pragma unroll
                for (int i = 0; i < C; i += CV) {
                    if constexpr (CV == 2) {
                        float2 x = *reinterpret_cast<const float2 *>(src + i);
                        pr[i] += x.x;
                        pr[i + CV - 1] += x.y;
                    } else {
                        pr[i] += src[i];
                    }
                }
            }
            float mt = -INFINITY;
#pragma unroll
            for (int i = 0; i < C; i++) {
                pr[i] = v[sq * C + i] ? pr[i] * p.sm_scale_log2 : -INFINITY;
                mt = fmaxf(mt, pr[i]);
            }
#pragma unroll
            for (int off = 1; off < G; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            const float m_new = fmaxf(m_run, mt);
            float sum = 0.0f;
            if (m_new == -INFINITY) {
                alpha = 1.0f;
#pragma unroll
                for (int i = 0; i < C; i++) pr[i] = 0.0f;
            } else {
                alpha = exp2f(m_run - m_new);
#pragma unroll
                for (int i = 0; i < C; i++) {
                    pr[i] = exp2f(pr[i] - m_new);
                    sum += pr[i];
                }
            }
#pragma unroll
            for (int off = 1; off < G; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l_run = l_run * alpha + sum;
            m_run = m_new;
        }
        if (!SH::SEP_P) __syncthreads(); /* partials consumed: Ps may overwrite them */
        {
            __nv_bfloat16 *dst = Ps + srow * SPITCH + sq * C;
            if constexpr (FMT == 3) { /* P V takes p times its column's token scale (l sums p) */
#pragma unroll
                for (int i = 0; i < C; i++) pr[i] *= ts_s[sq * C + i];
            }
#pragma unroll
            for (int i = 0; i < C; i += CV) {
                if constexpr (CV == 2)
                    *reinterpret_cast<uint32_t *>(dst + i) = f32x2_to_bf16x2(pr[i], pr[i + CV - 1]);
                else
                    dst[i] = __float2bfloat16_rn(pr[i]); /* the same RN rounding as the pair */
            }
            if (sq == 0) alpha_s[srow] = alpha;
        }
        __syncthreads();

        /* 4. O = O * alpha + P V, warp owns value dims [64 warp, 64 warp + 64) */
        {
            const int d0 = warp * 64;
#pragma unroll
            for (int g = 0; g < HG; g++) {
                const float a0 = alpha_s[g * 16 + fg], a1 = alpha_s[g * 16 + fg + 8];
                if (__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) continue; /* max unchanged */
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    o[g][n][0] *= a0;
                    o[g][n][1] *= a0;
                    o[g][n][2] *= a1;
                    o[g][n][3] *= a1;
                }
            }
            const __nv_bfloat16 *pa = Ps + (lane & 15) * SPITCH + (lane >> 4) * 8;
            const __nv_bfloat16 *vb = Ks + ((lane & 7) + ((lane >> 3) & 1) * 8) * KP + d0 + (lane >> 4) * 8;
#pragma unroll
            for (int kk = 0; kk < NK / 16; kk++) {
                uint32_t bb[4][4]; /* V fragments, shared by every head group */
#pragma unroll
                for (int np = 0; np < 4; np++) ldsm_x4_trans(bb[np], vb + kk * 16 * KP + np * 16);
#pragma unroll
                for (int g = 0; g < HG; g++) {
                    uint32_t a[4];
                    ldsm_x4(a, pa + g * 16 * SPITCH + kk * 16);
#pragma unroll
                    for (int np = 0; np < 4; np++) {
                        mma_m16n8k16(o[g][2 * np], a, bb[np][0], bb[np][1]);
                        mma_m16n8k16(o[g][2 * np + 1], a, bb[np][2], bb[np][3]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    /* finalize */
    if (sq == 0) {
        m_s[srow] = m_run;
        l_s[srow] = l_run;
    }
    __syncthreads();
    const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
    for (int g = 0; g < HG; g++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = g * 16 + fg + 8 * half, h = h0 + row;
            if (h >= p.heads) continue;
            const float m = m_s[row], l = l_s[row];
            float so, lse;
            if (p.nsplit == 1) {
                norm_out<SC>(p, h, m, l, so, lse);
                __nv_bfloat16 *orow = p.out + ((int64_t)bt * p.heads + h) * kVDim + warp * 64 + 2 * fc;
#pragma unroll
                for (int n = 0; n < 8; n++)
                    *reinterpret_cast<uint32_t *>(orow + n * 8) =
                        f32x2_to_bf16x2(o[g][n][2 * half] * so, o[g][n][2 * half + 1] * so);
                if (warp == 0 && fc == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
            } else {
                norm_part<SC>(p, m, l, so, lse);
                const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
                float *orow = p.part_o + prow * kVDim + warp * 64 + 2 * fc;
#pragma unroll
                for (int n = 0; n < 8; n++)
                    *reinterpret_cast<float2 *>(orow + n * 8) =
                        make_float2(o[g][n][2 * half] * so, o[g][n][2 * half + 1] * so);
                if (warp == 0 && fc == 0) p.part_lse[prow] = lse;
            }
        }
    }
}

/* Launch the kernel for p->head_groups (1, 2 or 4); the split plan in p (tiles_per_split)
 * was made with the same head groups' NK (the dispatch table's plan). */
template <int FMT, int HGV, bool SC>
static cudaError_t launch_hg(const Params *p, dim3 grid,
                             cudaStream_t stream) {
    const size_t sm = Shape<FMT, HGV>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(kernel<FMT, HGV, SC>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    return launch_pdl(kernel<FMT, HGV, SC>, grid, dim3(kThreads), sm,
                      stream, p);
}

/* SC: the variant that applies a latent scale (the static NVFP4 records only) */
template <int FMT, bool SC>
static cudaError_t launch_sc(const Params *p, dim3 grid, cudaStream_t stream) {
    switch (p->head_groups) {
        case 1: return launch_hg<FMT, 1, SC>(p, grid, stream);
        case 2: return launch_hg<FMT, 2, SC>(p, grid, stream);
        case 4: return launch_hg<FMT, 4, SC>(p, grid, stream);
        default: return cudaErrorInvalidValue;
    }
}

template <int FMT>
static cudaError_t launch(const Params *p, cudaStream_t stream) {
    dim3 grid((unsigned)(p->batch * p->s_q), (unsigned)p->head_blocks, (unsigned)p->nsplit);
    if constexpr (FMT == 1 || FMT == 2)
        if (p->q_rope_scaled) return launch_sc<FMT, true>(p, grid, stream);
    return launch_sc<FMT, false>(p, grid, stream);
}

} // namespace mlakv::decode::mma

#endif
