/* Small-head (<= 32 heads) sparse MLA decode for sm_90a: "transposed, register-A wgmma"
 * (dispatch: decode.cu; numerics identical to decode_kernel.cuh's engine mode).
 *
 * One warpgroup (128 threads) per CTA, 2 CTAs per SM; a CTA is one query row (b, t), all its
 * heads (N = 8, 16 or 32 columns, padding heads are zero queries never written) and one split
 * of the candidate list (the same split plan, partial layout and combine kernel as the
 * mma.sync kernel). Per tile of 64 candidates (raw records gathered with cp.async or TMA bulk
 * copies, ST stages):
 *   1. S^T [64 candidates x N] = K . Q^T with wgmma m64nNk16, A = K from REGISTERS, de-quantized
 *      straight from the raw record bytes into the A fragment layout: no bf16 K tile is ever
 *      written to shared memory. The k labels of a wgmma only have to agree between A and B, so
 *      thread (lane % 4 = q) takes a contiguous run of dims of its two candidates (128 NVFP4
 *      dims = 64 nibble bytes + 8 scale bytes, 16 RoPE dims) and Q [N x 576] sits in shared
 *      memory (128-byte swizzle, loaded once) with the same permutation. Row (warp w, g) is
 *      candidate 16w + 2g, row (w, g + 8) candidate 16w + 2g + 1 (so P stores pair up).
 *   2. online softmax over the S^T columns (heads): column max by shuffles inside a warp and
 *      through shared memory across the 4 warps; each thread keeps running max and its own
 *      partial row sum per column (reduced once at the end: every thread applies the same
 *      per-column rescale factors, so the partial sums add up).
 *   3. O^T [512 x N] += V^T [512 x 64] . P^T [64 x N], A = V^T from registers again: thread
 *      (w, g) owns NVFP4 scale group 8w + g (16 dims): rows g / g + 8 of m64 block mb are dims
 *      2mb / 2mb + 1 of that group (one byte of nibbles), so per candidate a thread reads one
 *      8-byte run and one scale byte; the bf16 pairs of two candidates are joined with byte
 *      permutes (the k of A are consecutive candidates). B = P^T (bf16, swizzled, K-major).
 * The output / partial store writes each head's 16 dims of the thread's group.
 * Measured (bench/NOTES_decode.md, T1): correct, but only 4-10% faster than the mma.sync kernel
 * from 64 query rows at <= 16 heads and slower below; decode.cu dispatches accordingly. */
#ifndef MLAKV_CUDA_DECODE_T90_CUH
#define MLAKV_CUDA_DECODE_T90_CUH

#include "cuda/decode/sm90/decode_sm90.cuh"

template <int FMT, int N>
struct mlakv_t90_shape {
    static constexpr int NK = MLAKV_T90_NK;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)N * MLAKV_DEC_QK * 2; /* multiple of 1024 */
    static constexpr size_t P_BYTES = (size_t)N * 128;              /* [N][64] bf16 */
    static constexpr size_t FIXED = 1024 + Q_BYTES + P_BYTES + NK * 8 + 4 * NK * 4 +
                                    (size_t)4 * N * 4 * 2 + 3 * 8;
    /* raw stages: 3 where two CTAs still fit in an SM's 228 KB (1 KB reserved per CTA) */
    static constexpr int ST = FIXED + (size_t)3 * NK * REC <= 115712 ? 3 : 2;
    static constexpr size_t RAW_BYTES = (size_t)ST * NK * REC;
    static constexpr size_t ADDR_BYTES = (size_t)NK * 8;
    static constexpr size_t VALID_BYTES = (size_t)(ST + 1) * NK * 4;
    static constexpr size_t RED_BYTES = (size_t)2 * 4 * N * 4; /* column max, column sum */
    static constexpr size_t BAR_BYTES = (size_t)ST * 8;       /* bulk-copy mbarriers */
    static constexpr size_t SMEM = 1024 + Q_BYTES + P_BYTES + RAW_BYTES + ADDR_BYTES +
                                   VALID_BYTES + RED_BYTES + BAR_BYTES;
};

#ifdef MLAKV_DEC90_DEVICE

/* D[64 x N] (fp32) += A (registers, bf16 fragment) * B (smem descriptor, K-major). */
template <int N>
__device__ __forceinline__ void mlakv_t90_wgmma(float (&d)[N / 2], const uint32_t (&a)[4],
                                                uint32_t b_lo, uint32_t b_hi);
template <>
__device__ __forceinline__ void mlakv_t90_wgmma<8>(float (&d)[4], const uint32_t (&a)[4],
                                                   uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, 1, 0;\nmov.b64 db, {%8, %9};\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, db, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_lo), "r"(b_hi));
}
template <>
__device__ __forceinline__ void mlakv_t90_wgmma<16>(float (&d)[8], const uint32_t (&a)[4],
                                                    uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, 1, 0;\nmov.b64 db, {%12, %13};\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, db, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_lo), "r"(b_hi));
}
template <>
__device__ __forceinline__ void mlakv_t90_wgmma<32>(float (&d)[16], const uint32_t (&a)[4],
                                                    uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, 1, 0;\nmov.b64 db, {%20, %21};\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, db, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b_lo), "r"(b_hi));
}

template <int N>
__device__ __forceinline__ void mlakv_t90_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Pin register values before a wgmma.fence (A fragments written by ordinary instructions must
 * be complete before the fence that precedes the wgmma reading them). */
template <int K>
__device__ __forceinline__ void mlakv_t90_reg_fence(uint32_t (&r)[K]) {
#pragma unroll
    for (int i = 0; i < K; i++) asm volatile("" : "+r"(r[i])::"memory");
}

/* bf16x2 of an E4M3 scale byte (exact). */
__device__ __forceinline__ uint32_t mlakv_t90_scale2(uint32_t byte) {
    const float f = mlakv_e4m3x2_to_f32((uint16_t)byte).x;
    return mlakv_f32x2_to_bf16x2(f, f);
}

/* 16 NVFP4 values (8 nibble bytes w, bf16x2 scale s2) -> 8 bf16x2, pair i = values 2i, 2i + 1.
 * (No two-level record here: engine mode applies its token scale to S and P, which t90 does
 * not implement; decode.cu runs s5 for it.) */
template <int FMT>
__device__ __forceinline__ void mlakv_t90_group(uint2 w, uint32_t s2, uint32_t lut_lo,
                                                uint32_t lut_hi, uint32_t (&x)[8]) {
    static_assert(FMT == 1 || FMT == 2, "t90: the static NVFP4 records only");
    uint32_t a[4], b[4];
    mlakv_nvfp4_group_s2(w.x, w.y, s2, a, b, lut_lo, lut_hi);
#pragma unroll
    for (int k = 0; k < 4; k++) x[k] = a[k], x[4 + k] = b[k];
}

/* The 16 RoPE values of dims 512 + 16q .. +16 of one record as 8 bf16x2. */
template <int FMT>
__device__ __forceinline__ void mlakv_t90_rope(const uint8_t *r, int q, uint32_t (&x)[8]) {
    if (FMT == 1) {
        const uint4 u0 = *reinterpret_cast<const uint4 *>(r + 304 + 32 * q);
        const uint4 u1 = *reinterpret_cast<const uint4 *>(r + 304 + 32 * q + 16);
        x[0] = u0.x, x[1] = u0.y, x[2] = u0.z, x[3] = u0.w;
        x[4] = u1.x, x[5] = u1.y, x[6] = u1.z, x[7] = u1.w;
    } else {
        const uint4 v = *reinterpret_cast<const uint4 *>(r + 304 + 16 * q);
        const float rs = *reinterpret_cast<const float *>(r + 288);
        const uint4 o0 = mlakv_e4m3x8_scaled(make_uint2(v.x, v.y), rs);
        const uint4 o1 = mlakv_e4m3x8_scaled(make_uint2(v.z, v.w), rs);
        x[0] = o0.x, x[1] = o0.y, x[2] = o0.z, x[3] = o0.w;
        x[4] = o1.x, x[5] = o1.y, x[6] = o1.z, x[7] = o1.w;
    }
}

#endif /* MLAKV_DEC90_DEVICE */

/* The default record gather (MLAKV_T90_GATHER_DEFAULT 1): chunk f = tid + NT i of the tile's
 * 64 x REC/16 16-byte chunks, so one warp instruction covers ~1 record (whole 32-byte sectors)
 * instead of 16 records (2 threads per record left records at 16-byte offsets split over sector
 * pairs: 42% extra sectors measured). */
template <int NK, int ST, int REC, int NT>
__device__ __forceinline__ void mlakv_t90_issue_flat(const mlakv_decode_params &p, uint8_t *raw,
                                                     const int64_t *addr, const int *valid,
                                                     int tile, int ntiles, int tid) {
    if (tile < ntiles) {
        uint8_t *dst = raw + (tile % ST) * NK * REC;
        const int *vv = valid + (tile % (ST + 1)) * NK;
        constexpr int R16 = REC / 16, TOT = NK * R16;
#pragma unroll
        for (int i = 0; i < (TOT + NT - 1) / NT; i++) {
            const int f = tid + NT * i;
            if (f < TOT) {
                const int rec = f / R16, c = f - rec * R16;
                if (vv[rec]) mlakv_cp_async16(dst + rec * REC + 16 * c, p.base + addr[rec] + 16 * c);
            }
        }
    }
    mlakv_cp_async_commit();
}

/* Dims of S k-step j (0..35) held by lane quad position q: k labels 16j + 2q + {0, 1} are dims
 * d + {0, 1}, labels 16j + 8 + 2q + {0, 1} dims d + {2, 3}. NVFP4 steps: chunk c = j / 4 of
 * thread q is scale group (c + q) % 8 of its 128-dim run (the rotation spreads the four quad
 * positions over the shared-memory banks); RoPE steps 32..35: 16 dims per q. */
__device__ __forceinline__ int mlakv_t90_dim(int j, int q) {
    return j < 32 ? 128 * q + 16 * (((j >> 2) + q) & 7) + 4 * (j & 3) : 512 + 16 * q + 4 * (j - 32);
}

template <int FMT, int N>
__global__ void __launch_bounds__(MLAKV_T90_THREADS, MLAKV_T90_MINB)
    mlakv_decode_t90_kernel(const mlakv_decode_params p) {
#ifdef MLAKV_DEC90_DEVICE
    typedef mlakv_t90_shape<FMT, N> SH;
    constexpr int NK = SH::NK, ST = SH::ST, REC = SH::REC, NT = MLAKV_T90_THREADS;
    constexpr int NC = N / 4; /* S / O columns per thread: 8i + 2q + e, i < N / 8, e < 2 */

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (mlakv_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ps = Qs + SH::Q_BYTES;
    uint8_t *raw = Ps + SH::P_BYTES;
    int64_t *addr = reinterpret_cast<int64_t *>(raw + SH::RAW_BYTES);
    int *valid = reinterpret_cast<int *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES);
    float *red_m = reinterpret_cast<float *>(raw + SH::RAW_BYTES + SH::ADDR_BYTES + SH::VALID_BYTES);
    float *red_l = red_m + 4 * N;
    uint64_t *bars = reinterpret_cast<uint64_t *>(red_l + 4 * N); /* 8-byte aligned */

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g8 = lane >> 2, q = lane & 3;
    const int bt = blockIdx.x, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;

    int cbeg, cend, ntiles;
    mlakv_dec_split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
    const mlakv_dec_gather<NK, ST, REC, NT> g = {p, idx_row, cbeg, cend, ntiles,
                                                 tid, raw, addr, valid};
    const int mode = p.diag;
    /* gather: bulk copies (one per valid record, by threads < 64, completing on the stage's
     * mbarrier; warps 0 and 1 each arrive once with their byte count), or cp.async with the
     * flat chunk mapping, or cp.async per record (2 threads per record) */
    const int gk = (mode >> 3) & 3 ? (mode >> 3) & 3 : MLAKV_T90_GATHER_DEFAULT;
    const bool bulk = gk == 2;
    if (bulk && tid == 0) {
#pragma unroll
        for (int s = 0; s < ST; s++) mlakv_mbar_init(bars + s, 2);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    auto issue = [&](int tile) {
        if (mode & 2) {
            mlakv_cp_async_commit();
        } else if (bulk) {
            if (tile < ntiles && tid < NK) {
                const bool ok = valid[(tile % (ST + 1)) * NK + tid] != 0;
                const uint32_t cnt = __popc(__ballot_sync(0xffffffffu, ok));
                if (lane == 0) mlakv_mbar_expect_tx(bars + tile % ST, cnt * REC);
                if (ok)
                    mlakv_bulk_copy_g2s(raw + (tile % ST) * NK * REC + tid * REC, p.base + addr[tid],
                                        REC, bars + tile % ST);
            }
        } else if (gk == 1) {
            mlakv_t90_issue_flat<NK, ST, REC, NT>(p, raw, addr, valid, tile, ntiles, tid);
        } else {
            g.issue(tile);
        }
    };

    /* prologue: indices of the first ST tiles and Q (plain loads, both in flight together),
     * ST - 1 tiles issued; tile ST - 1 is issued at the top of tile 0 */
    int idx_reg = -1, idx_pre[ST];
    g.first_indices(idx_pre);
    constexpr int QPC = 144 * N / NT; /* 8-byte Q pieces per thread */
    uint2 qv[QPC];
    {
        const __nv_bfloat16 *qrow = p.q + (int64_t)b * p.q_sb + (int64_t)t * p.q_st;
#pragma unroll
        for (int i = 0; i < QPC; i++) {
            const int pc = tid + NT * i, h = pc / 144, j = (pc % 144) >> 2, qq = pc & 3;
            qv[i] = make_uint2(0u, 0u);
            if (h < p.heads)
                qv[i] = __ldg(reinterpret_cast<const uint2 *>(qrow + (int64_t)h * p.q_sh +
                                                              mlakv_t90_dim(j, qq)));
        }
    }
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (tid < NK) g.set_addr(s, idx_pre[s]);
        __syncthreads();
        issue(s);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < QPC; i++) { /* Q [N x 576], k permuted, nine swizzled 64-k blocks */
        const int pc = tid + NT * i, h = pc / 144, j = (pc % 144) >> 2, qq = pc & 3;
        const int k0 = 16 * j + 2 * qq, k1 = k0 + 8;
        *reinterpret_cast<uint32_t *>(Qs + (k0 >> 6) * (N * 128) + mlakv_sw128(h, (k0 >> 3) & 7) +
                                      2 * (k0 & 7)) = qv[i].x;
        *reinterpret_cast<uint32_t *>(Qs + (k1 >> 6) * (N * 128) + mlakv_sw128(h, (k1 >> 3) & 7) +
                                      2 * (k1 & 7)) = qv[i].y;
    }
    mlakv_fence_proxy_async(); /* Q visible to the tensor cores (after the first barrier) */
    if (tid < NK) {
        g.set_addr(ST - 1, idx_pre[ST - 1]);
        idx_reg = g.load_idx(ST);
    }

    float m_run[NC], l_part[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) m_run[c] = -INFINITY, l_part[c] = 0.0f;
    float o[8][N / 2];
#pragma unroll
    for (int mb = 0; mb < 8; mb++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) o[mb][i] = 0.0f;

    const uint32_t qs_a = mlakv_smem_addr(Qs), ps_a = mlakv_smem_addr(Ps);
    const uint32_t dq0 = mlakv_gdesc_lo(qs_a, 16), dp0 = mlakv_gdesc_lo(ps_a, 16);
    const uint32_t dhi = mlakv_gdesc_hi(1024);
    /* E2M1 permute tables kept in registers (otherwise rematerialized before every permute) */
    uint32_t lut_lo = MLAKV_E2M1_LO_A, lut_hi = MLAKV_E2M1_HI_A;
    asm volatile("" : "+r"(lut_lo), "+r"(lut_hi));
    const int c0 = 16 * warp + 2 * g8; /* S rows g / g + 8: candidates c0 / c0 + 1 */
    const int gv = 8 * warp + g8;      /* P V: the thread's NVFP4 scale group */

    for (int it = 0; it < ntiles; ++it) {
        if (!bulk) mlakv_cp_async_wait<ST - 2>();
        __syncthreads(); /* raw tile `it` landed (cp.async); stage of tile it - 1 free; addresses visible */
        issue(it + ST - 1);
        if (bulk && !(mode & 2)) mlakv_mbar_wait(bars + it % ST, (uint32_t)(it / ST) & 1u);

        const uint8_t *rt = raw + (it % ST) * NK * REC;
        const int *vt = valid + (it % (ST + 1)) * NK;
        /* validity of the 64 candidates as a bit mask (same in every warp) */
        const uint32_t vlo = __ballot_sync(0xffffffffu, vt[lane] != 0);
        const uint32_t vhi = __ballot_sync(0xffffffffu, vt[32 + lane] != 0);
        const uint64_t vmask = ((uint64_t)vhi << 32) | vlo;
        if (mode & 1) {
            g.advance(it, idx_reg);
            continue;
        }

        /* 1. S^T = K Q^T: 8 NVFP4 chunks (one scale group, 4 k-steps each) + 1 RoPE chunk */
        float s[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; i++) s[i] = 0.0f;
        {
            const uint8_t *r0 = rt + c0 * REC, *r1 = r0 + REC;
#pragma unroll
            for (int c = 0; c < 9; c++) {
                uint32_t x0[8], x1[8];
                if (c < 8) {
                    const int gq = (c + q) & 7;
                    const uint2 w0 = *reinterpret_cast<const uint2 *>(r0 + 64 * q + 8 * gq);
                    const uint2 w1 = *reinterpret_cast<const uint2 *>(r1 + 64 * q + 8 * gq);
                    const uint32_t s0 = mlakv_t90_scale2(r0[256 + 8 * q + gq]);
                    const uint32_t s1 = mlakv_t90_scale2(r1[256 + 8 * q + gq]);
                    mlakv_t90_group<FMT>(w0, s0, lut_lo, lut_hi, x0);
                    mlakv_t90_group<FMT>(w1, s1, lut_lo, lut_hi, x1);
                } else {
                    mlakv_t90_rope<FMT>(r0, q, x0);
                    mlakv_t90_rope<FMT>(r1, q, x1);
                }
                mlakv_t90_reg_fence(x0);
                mlakv_t90_reg_fence(x1);
                mlakv_wgmma_fence();
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    const int j = 4 * c + jj;
                    const uint32_t a[4] = {x0[2 * jj], x1[2 * jj], x0[2 * jj + 1], x1[2 * jj + 1]};
                    mlakv_t90_wgmma<N>(s, a, dq0 + (uint32_t)(((j >> 2) * (N * 128) + (j & 3) * 32) >> 4),
                                       dhi);
                }
                mlakv_wgmma_commit();
                mlakv_t90_wait<1>(); /* chunk c - 1 done: its registers may be reused */
            }
            mlakv_t90_wait<0>();
            mlakv_reg_fence(s);
#pragma unroll
            for (int mb = 0; mb < 8; mb++) mlakv_reg_fence(o[mb]); /* P V of tile it - 1 done */
        }

        /* 2. online softmax over the columns (heads) */
        const bool ok0 = (vmask >> c0) & 1, ok1 = (vmask >> (c0 + 1)) & 1;
#pragma unroll
        for (int i = 0; i < N / 8; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[4 * i + e] = ok0 ? s[4 * i + e] * p.sm_scale_log2 : -INFINITY;
                s[4 * i + 2 + e] = ok1 ? s[4 * i + 2 + e] * p.sm_scale_log2 : -INFINITY;
            }
        mlakv_dec90t_colmax_put<N>(s, red_m, warp, g8, q);
        __syncthreads(); /* column maxima of the 4 warps */
        float al[NC];
        bool moved = false;
#pragma unroll
        for (int i = 0; i < N / 8; i++) {
            const float2 mx = mlakv_dec90t_colmax4<N>(red_m, i, q);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int cc = 2 * i + e;
                const float mn = fmaxf(m_run[cc], e ? mx.y : mx.x);
                al[cc] = mn == -INFINITY ? 1.0f : exp2f(m_run[cc] - mn);
                moved |= al[cc] != 1.0f;
                float p0 = 0.0f, p1 = 0.0f;
                if (mn != -INFINITY) {
                    p0 = exp2f(s[4 * i + e] - mn);
                    p1 = exp2f(s[4 * i + 2 + e] - mn);
                }
                l_part[cc] = l_part[cc] * al[cc] + (p0 + p1);
                m_run[cc] = mn;
                /* P [head][candidate]: candidates c0, c0 + 1 side by side */
                const int h = 8 * i + 2 * q + e;
                *reinterpret_cast<uint32_t *>(Ps + mlakv_sw128(h, c0 >> 3) + 2 * (c0 & 7)) =
                    mlakv_f32x2_to_bf16x2(p0, p1);
            }
        }
        mlakv_fence_proxy_async();
        mlakv_dec90t_rescale<N>(o, al, moved); /* O is idle: P V of tile it - 1 has been waited */
        __syncthreads(); /* P complete */

        /* 3. O^T += V^T P^T: k-step kk = candidates 16kk + {2q, 2q + 1, 2q + 8, 2q + 9} */
        if (!(mode & 4)) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t x[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int cd = 16 * kk + 2 * q + (u & 1) + 8 * (u >> 1);
                const uint8_t *r = rt + cd * REC;
                const bool ok = (vmask >> cd) & 1;
                const uint2 w = *reinterpret_cast<const uint2 *>(r + 8 * gv);
                /* an invalid record (never loaded) gets scale 0: finite nibbles times 0 */
                const uint32_t s2 = ok ? mlakv_t90_scale2(r[256 + gv]) : 0u;
                mlakv_t90_group<FMT>(w, s2, lut_lo, lut_hi, x[u]);
            }
            uint32_t a[8][4]; /* k = consecutive candidates: bf16 halves of two records joined */
#pragma unroll
            for (int mb = 0; mb < 8; mb++) {
                a[mb][0] = mlakv_prmt(x[0][mb], x[1][mb], 0x5410);
                a[mb][1] = mlakv_prmt(x[0][mb], x[1][mb], 0x7632);
                a[mb][2] = mlakv_prmt(x[2][mb], x[3][mb], 0x5410);
                a[mb][3] = mlakv_prmt(x[2][mb], x[3][mb], 0x7632);
                mlakv_t90_reg_fence(a[mb]);
            }
            if (kk == 0) {
#pragma unroll
                for (int mb = 0; mb < 8; mb++) mlakv_reg_fence(o[mb]); /* rescale before the fence */
            }
            mlakv_wgmma_fence();
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
                mlakv_t90_wgmma<N>(o[mb], a[mb], dp0 + (uint32_t)((kk * 32) >> 4), dhi);
            mlakv_wgmma_commit();
            if (kk < 3) mlakv_t90_wait<1>();
        }
        }
        /* all of P V retired inside the tile: with groups left in flight across the loop edge
         * ptxas serializes every wgmma (C7514) */
        mlakv_t90_wait<0>();
        g.advance(it, idx_reg); /* addresses of tile it + ST (issued at the top of it + 1) */
    }
    mlakv_cp_async_wait<0>();
    mlakv_t90_wait<0>();
#pragma unroll
    for (int mb = 0; mb < 8; mb++) mlakv_reg_fence(o[mb]);

    /* finalize: column sums over the 64 rows (g8 by shuffles, warps through shared memory) */
    mlakv_dec90t_colsum_put<N>(l_part, red_l, warp, g8, q);
    __syncthreads();
    const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int cc = 2 * i + e, h = 8 * i + 2 * q + e;
            if (h >= p.heads) continue;
            const float l = mlakv_dec90t_colsum4<N>(red_l, h);
            const float m = m_run[cc];
            float so, lse;
            /* dims 16 gv + 2mb (+1): o[mb][4i + e] (o[mb][4i + 2 + e]) */
            if (p.nsplit == 1) {
                mlakv_dec_norm_out(p, h, m, l, so, lse);
                uint32_t v[8];
#pragma unroll
                for (int mb = 0; mb < 8; mb++)
                    v[mb] = mlakv_f32x2_to_bf16x2(o[mb][4 * i + e] * so, o[mb][4 * i + 2 + e] * so);
                uint4 *orow = reinterpret_cast<uint4 *>(p.out + ((int64_t)bt * p.heads + h) * MLAKV_DEC_V + 16 * gv);
                orow[0] = make_uint4(v[0], v[1], v[2], v[3]);
                orow[1] = make_uint4(v[4], v[5], v[6], v[7]);
                if (tid < 4) p.lse[(int64_t)bt * p.heads + h] = lse;
            } else {
                mlakv_dec_norm_part(m, l, so, lse);
                const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
                float4 *orow = reinterpret_cast<float4 *>(p.part_o + prow * MLAKV_DEC_V + 16 * gv);
#pragma unroll
                for (int k = 0; k < 4; k++)
                    orow[k] = make_float4(o[2 * k][4 * i + e] * so, o[2 * k][4 * i + 2 + e] * so,
                                          o[2 * k + 1][4 * i + e] * so, o[2 * k + 1][4 * i + 2 + e] * so);
                if (tid < 4) p.part_lse[prow] = lse;
            }
        }
#endif /* MLAKV_DEC90_DEVICE */
}

/* heads <= 32 on sm_90a: N = 8, 16 or 32 columns. */
template <int FMT, int N>
static cudaError_t mlakv_decode_t90_launch_n(const mlakv_decode_params *p, cudaStream_t stream) {
    const size_t sm = mlakv_t90_shape<FMT, N>::SMEM;
    static_assert(MLAKV_T90_MINB * (mlakv_t90_shape<FMT, N>::SMEM + 1024) <= 228 * 1024,
                  "the split plan assumes MLAKV_T90_MINB CTAs per SM");
    cudaError_t err = cudaFuncSetAttribute(mlakv_decode_t90_kernel<FMT, N>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    dim3 grid((unsigned)(p->batch * p->s_q), 1, (unsigned)p->nsplit);
    return mlakv_launch_pdl(mlakv_decode_t90_kernel<FMT, N>, grid, dim3(MLAKV_T90_THREADS), sm,
                            stream, p);
}

template <int FMT>
static cudaError_t mlakv_decode_t90_launch(const mlakv_decode_params *p, cudaStream_t stream) {
    if (p->heads <= 8) return mlakv_decode_t90_launch_n<FMT, 8>(p, stream);
    if (p->heads <= 16) return mlakv_decode_t90_launch_n<FMT, 16>(p, stream);
    if (p->heads <= 32) return mlakv_decode_t90_launch_n<FMT, 32>(p, stream);
    return cudaErrorInvalidValue;
}

#endif
