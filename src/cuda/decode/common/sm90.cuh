/* Consumer pieces shared by the sm_90a decode kernels: the transposed (records x heads)
 * column reductions, de-quantization into a swizzled K tile, the accumulator-fragment
 * softmax, O rescale and P V issue, and the row epilogue. */
#ifndef MLAKV_CUDA_DECODE_COMMON_SM90_CUH
#define MLAKV_CUDA_DECODE_COMMON_SM90_CUH

#include "cuda/common/dequant.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/common/epilogue.cuh"
#include "cuda/decode/common/gather.cuh"

namespace mlakv::decode {

#ifdef MLAKV_SM90A_DEVICE
/* ---- transposed kernels (the narrow-head kernel): S^T [64 records x N heads] and O^T [512 x N] fragments,
 * columns 8i + 2q + e of a thread, reduced over the 64 rows (4 warps) ---- */
/* column maxima of warp-column i from the 4 warps' rows at rm [4][N] (written before a barrier) */
template <int N>
__device__ __forceinline__ float2 col_max4(const float *rm, int i, int q) {
    float2 mx = *reinterpret_cast<const float2 *>(rm + 8 * i + 2 * q);
#pragma unroll
    for (int w = 1; w < 4; w++) {
        const float2 v = *reinterpret_cast<const float2 *>(rm + w * N + 8 * i + 2 * q);
        mx.x = fmaxf(mx.x, v.x);
        mx.y = fmaxf(mx.y, v.y);
    }
    return mx;
}
/* the column maxima of the warp's 16 rows (s: the thread's S^T fragment, rows r0 and r0 + 8,
 * columns 8i + 2q + e; the 8 row groups g8 by shuffles); lane g8 0 writes them to red [4][N] at
 * row `warp` (read back with col_max4 after a barrier) */
template <int N>
__device__ __forceinline__ void col_max_put(const float (&s)[N / 2], float *red, int warp,
                                            int g8, int q) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
        float cm[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float m = fmaxf(s[4 * i + e], s[4 * i + 2 + e]);
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
            cm[e] = m;
        }
        if (g8 == 0) *reinterpret_cast<float2 *>(red + warp * N + 8 * i + 2 * q) = make_float2(cm[0], cm[1]);
    }
}
/* a column's sum over the 4 warps' rows at red [4][N] (written before a barrier) */
template <int N>
__device__ __forceinline__ float col_sum4(const float *red, int h) {
    return red[h] + red[N + h] + red[2 * N + h] + red[3 * N + h];
}
/* the thread's partial column sums l_part (column 8i + 2q + e = index 2i + e) summed over the
 * warp's 16 rows (the 8 row groups g8, by shuffles); lane g8 0 writes them to red [4][N] at row
 * `warp` (read back after a barrier) */
template <int N>
__device__ __forceinline__ void col_sum_put(const float (&l_part)[N / 4], float *red,
                                            int warp, int g8, int q) {
#pragma unroll
    for (int i = 0; i < N / 8; i++) {
        float lt[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float l = l_part[2 * i + e];
            l += __shfl_xor_sync(0xffffffffu, l, 4);
            l += __shfl_xor_sync(0xffffffffu, l, 8);
            l += __shfl_xor_sync(0xffffffffu, l, 16);
            lt[e] = l;
        }
        if (g8 == 0) *reinterpret_cast<float2 *>(red + warp * N + 8 * i + 2 * q) = make_float2(lt[0], lt[1]);
    }
}
/* O^T *= al per column (head), skipped when no column max moved in the warp */
template <int N>
__device__ __forceinline__ void col_rescale(float (&o)[8][N / 2], const float (&al)[N / 4],
                                            bool moved) {
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int i = 0; i < N / 8; i++) {
                o[mb][4 * i] *= al[2 * i];
                o[mb][4 * i + 1] *= al[2 * i + 1];
                o[mb][4 * i + 2] *= al[2 * i];
                o[mb][4 * i + 3] *= al[2 * i + 1];
            }
    }
}

/* dequant_record into row `key` of the swizzled K tile (NK rows per 64-column block). */
template <int FMT, int TPR, int NK, bool ZS = false>
__device__ __forceinline__ void dequant_swizzled(const uint8_t *r, bool ok, uint8_t *ks,
                                                 int key, int part) {
    dequant_record<FMT, TPR, false, ZS>(r, ok, part, [&](int q, uint4 v) {
        *reinterpret_cast<uint4 *>(ks + (q >> 3) * (NK * 128) + sw128(key, q & 7)) = v;
    });
}

#endif /* MLAKV_SM90A_DEVICE */

#ifdef MLAKV_SM90A_DEVICE
/* Softmax pieces shared by the sm90 kernels' accumulator-fragment softmaxes (rows r0, r0 + 8
 * of a thread quad): the quad's maxima of both rows, and the end of a step: the quad's sums of
 * p, then the running sums (rescaled by alpha) and maxima. */
__device__ __forceinline__ void quad_max(float &mx0, float &mx1) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
}
__device__ __forceinline__ void row_update(float sum0, float sum1, float al0,
                                           float al1, float mn0, float mn1,
                                           float &m_run0, float &m_run1,
                                           float &l_run0, float &l_run1) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
        sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
    }
    l_run0 = l_run0 * al0 + sum0;
    l_run1 = l_run1 * al1 + sum1;
    m_run0 = mn0;
    m_run1 = mn1;
}

/* Online softmax step of warpgroup `part` (0 or 1) on its S fragment: NJ n8 blocks, s[4j + {0, 1}]
 * row r0 and s[4j + {2, 3}] row r0 + 8, columns 8j + cq + {0, 1} (validity flags at v). Masks
 * and scales S (log2 domain), exchanges the row maxima with the other part through red_m
 * (barrier BAR: 0 = __syncthreads, else named barrier BAR of 256 threads), writes P (bf16) into
 * the swizzled P tile at 16-byte chunks pc + NJ * part + j, updates the running max and sum of rows
 * r0 and r0 + 8 and returns the rescale factors of O (al0, al1). */
template <int NJ, int BAR>
__device__ __forceinline__ void softmax_2wg(const Params &p,
                                            float (&s)[4 * NJ], const int *v, int part,
                                            int lane, int r0, int cq, float *red_m,
                                            uint8_t *Ps, float &m_run0, float &m_run1,
                                            float &l_run0, float &l_run1, float &al0,
                                            float &al1, int pc = 0) {
    constexpr int HP = 64;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const bool ok = v[8 * j + cq + e] != 0;
            s[4 * j + e] = ok ? s[4 * j + e] * p.sm_scale_log2 : -INFINITY;
            s[4 * j + 2 + e] = ok ? s[4 * j + 2 + e] * p.sm_scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, s[4 * j + e]);
            mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
        }
    quad_max(mx0, mx1);
    if ((lane & 3) == 0) {
        red_m[part * HP + r0] = mx0;
        red_m[part * HP + r0 + 8] = mx1;
    }
    if constexpr (BAR == 0) __syncthreads();
    else bar_sync(BAR, 256);
    const float mn0 = fmaxf(m_run0, fmaxf(red_m[r0], red_m[HP + r0]));
    const float mn1 = fmaxf(m_run1, fmaxf(red_m[r0 + 8], red_m[HP + r0 + 8]));
    al0 = mn0 == -INFINITY ? 1.0f : exp2f(m_run0 - mn0);
    al1 = mn1 == -INFINITY ? 1.0f : exp2f(m_run1 - mn1);
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        float p0 = 0.f, p1 = 0.f, p2 = 0.f, p3 = 0.f;
        if (mn0 != -INFINITY) {
            p0 = exp2f(s[4 * j] - mn0);
            p1 = exp2f(s[4 * j + 1] - mn0);
        }
        if (mn1 != -INFINITY) {
            p2 = exp2f(s[4 * j + 2] - mn1);
            p3 = exp2f(s[4 * j + 3] - mn1);
        }
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        const int chunk = pc + part * NJ + j; /* 16-byte chunk of the 128-byte P row */
        *reinterpret_cast<uint32_t *>(Ps + sw128(r0, chunk) + 2 * cq) =
            f32x2_to_bf16x2(p0, p1);
        *reinterpret_cast<uint32_t *>(Ps + sw128(r0 + 8, chunk) + 2 * cq) =
            f32x2_to_bf16x2(p2, p3);
    }
    row_update(sum0, sum1, al0, al1, mn0, mn1, m_run0, m_run1, l_run0, l_run1);
}

/* O = O * alpha + P V for one warpgroup's 256 value dims: P [64 x NK] bf16 at shared address
 * ps_a (swizzled, K-major), V = the K tile's rows [NK] x these 256 columns at v_a (MN-major,
 * transposed operand). The rescale is skipped when no row max moved. _issue leaves the group
 * in flight (committed, not waited for: o must not be touched until a wait) and leaves the
 * rescale to the caller. */
__device__ __forceinline__ void rescale_o(float (&o)[128], float al0, float al1) {
    if (!__all_sync(0xffffffffu, al0 == 1.0f && al1 == 1.0f)) {
#pragma unroll
        for (int j = 0; j < 32; j++) {
            o[4 * j] *= al0;
            o[4 * j + 1] *= al0;
            o[4 * j + 2] *= al1;
            o[4 * j + 3] *= al1;
        }
    }
}
template <int NK>
__device__ __forceinline__ void issue_pv(float (&o)[128], uint32_t ps_a,
                                         uint32_t v_a) {
    wgmma_fence();
    {
        const uint32_t dp0 = wgmma_desc_lo(ps_a, 16);
        const uint32_t dv0 = wgmma_desc_lo(v_a, NK * 128);
        const uint32_t dhi = wgmma_desc_hi(1024);
#pragma unroll
        for (int kk = 0; kk < NK / 16; kk++)
            wgmma_m64n256_tb(o, dp0 + (uint32_t)(kk * 32 >> 4), dhi,
                             dv0 + (uint32_t)(kk * 16 * 128 >> 4), dhi);
    }
    wgmma_commit();
}
template <int NK>
__device__ __forceinline__ void accumulate_pv(float (&o)[128], float al0, float al1,
                                              uint32_t ps_a, uint32_t v_a) {
    rescale_o(o, al0, al1);
    issue_pv<NK>(o, ps_a, v_a);
    wgmma_wait0();
    reg_fence(o);
}

/* Fragment row `half` (row r0 or r0 + 8) of a warpgroup's O [64 x 256] times so, as bf16 pairs:
 * put(j, word) gets columns 8 j + cq, + 1 (shared by the direct and the staged epilogue) */
template <class Put>
__device__ __forceinline__ void row_bf16(const float (&o)[128], int half, float so,
                                         Put &&put) {
#pragma unroll
    for (int j = 0; j < 32; j++)
        put(j, f32x2_to_bf16x2(o[4 * j + 2 * half] * so, o[4 * j + 2 * half + 1] * so));
}

/* Epilogue of both kernels: warpgroup `part` holds value dims [256*part, +256) of 64 head rows
 * (rows r0 and r0+8 of its fragment, running max m_run0/1 in the log2 domain); red_l holds both
 * parts' row sums. Writes the normalized bf16 output and lse (sink folded in), or the fp32 split
 * partial (O/l, natural-log lse) for the combine kernel. Padding heads are not written. */
template <bool kScaled>
__device__ __forceinline__ void store_rows(const Params &p,
                                           const float (&o)[128], const float *red_l,
                                           int part, int lane, int r0, int cq, int h0,
                                           int bt, int split, float m_run0,
                                           float m_run1) {
    constexpr int HP = 64;
    const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = r0 + 8 * half, h = h0 + row;
        if (h >= p.heads) continue;
        const float m = half ? m_run1 : m_run0;
        const float l = red_l[row] + red_l[HP + row];
        float so, lse;
        const int dbase = part * 256 + cq;
        if (p.nsplit == 1) {
            norm_out<kScaled>(p, h, m, l, so, lse);
            __nv_bfloat16 *orow = p.out + ((int64_t)bt * p.heads + h) * kVDim + dbase;
            row_bf16(o, half, so, [&](int j, uint32_t w) {
                *reinterpret_cast<uint32_t *>(orow + 8 * j) = w;
            });
            if (part == 0 && (lane & 3) == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
        } else {
            norm_part<kScaled>(p, m, l, so, lse);
            const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
            float *orow = p.part_o + prow * kVDim + dbase;
#pragma unroll
            for (int j = 0; j < 32; j++)
                *reinterpret_cast<float2 *>(orow + 8 * j) =
                    make_float2(o[4 * j + 2 * half] * so, o[4 * j + 2 * half + 1] * so);
            if (part == 0 && (lane & 3) == 0) p.part_lse[prow] = lse;
        }
    }
}

/* Both parts' row sums (l_run0/1) into red_l, barrier BAR (0 = __syncthreads, else named
 * barrier BAR of 256 threads), then store_rows. */
template <int BAR>
__device__ __forceinline__ void finish_rows(const Params &p,
                                            const float (&o)[128], float *red_l, int part,
                                            int lane, int r0, int cq, int h0, int bt,
                                            int split, float m_run0, float m_run1,
                                            float l_run0, float l_run1) {
    constexpr int HP = 64;
    if ((lane & 3) == 0) {
        red_l[part * HP + r0] = l_run0;
        red_l[part * HP + r0 + 8] = l_run1;
    }
    if constexpr (BAR == 0) __syncthreads();
    else bar_sync(BAR, 256);
    store_rows<false>(p, o, red_l, part, lane, r0, cq, h0, bt, split, m_run0, m_run1);
}

#endif

} // namespace mlakv::decode

#endif
