/* "v6": v5 (decode_sm90_direct.cuh) with the records gathered by cp.async into a raw stage in
 * shared memory, two tiles ahead, and ONE bf16 K buffer instead of two; 64-head blocks, NVFP4
 * records, 384 threads (MLAKV_CUDA_DECODE_SM90=v6; measurements: bench/NOTES_decode.md, D10).
 *
 * Why: v5's producers hold at most two records per thread in registers, and its stage-removal
 * runs (D10) show where the time goes at b=128 h=64: de-quantization and stores alone 30 us,
 * the skeleton 22 us, the consumers alone 72.5 us, but the producers with their loads 98.8 us
 * of the 102 us: they wait for records (too few bytes in flight), not for instructions. Two K
 * buffers and Q leave no room for a stage; one K buffer does (Q 72 KB + K 72 KB + 2 x 64 raw
 * records 55 KB), at the price that a tile's de-quantization (~0.25 us) no longer overlaps the
 * previous tile's tensor work. Per tile:
 *   - warpgroups 0 and 2 read their 32 records of tile i from stage slot i % 2 into registers,
 *     issue the copies of tile i + 2 into that slot, wait until the K buffer is free (EMPTY:
 *     warpgroup 1's P V(i - 1) done; warpgroup 2 has waited for its own), de-quantize into it
 *     and arrive at FULL;
 *   - warpgroup 1: S(i), softmax, P(i) into the buffer's RoPE block, O[:, 0:256) += P V(i),
 *     EMPTY; warpgroup 2: O[:, 256:512) += P V(i), then its part of tile i + 1.
 * Copies: one warp instruction per record (lane c copies 16-byte chunk c), the indices of the
 * slot's next tile in the same cp.async group (as s5's staged producers). Same numerics as v5. */
#ifndef MLAKV_CUDA_DECODE_SM90_STAGED_CUH
#define MLAKV_CUDA_DECODE_SM90_STAGED_CUH

template <int FMT>
struct mlakv_dec90g_shape {
    static constexpr int NK = 64, HP = 64;
    static constexpr int REC = mlakv_rec_traits<FMT>::bytes;
    static constexpr size_t Q_BYTES = (size_t)HP * MLAKV_DEC_QK * 2; /* 72 KB */
    static constexpr size_t KBUF = (size_t)NK * MLAKV_DEC_QK * 2;    /* 72 KB, one buffer */
    static constexpr size_t STAGE = 2 * (size_t)NK * REC + 2 * NK * 4; /* raw records, indices */
    static constexpr size_t SMALL = 8 * 4 /* valid-mask words */ + 2 * HP * 4 /* alpha */ +
                                    2 * HP * 4 /* red_l */ + HP * 4 /* red_m */ + 3 * 8 /* mbarriers */;
    static constexpr size_t SMEM = 1024 + Q_BYTES + KBUF + STAGE + SMALL;
    static_assert(SMEM <= 232448, "shared memory");
};

template <int FMT>
__global__ void __launch_bounds__(MLAKV_DEC90D_THREADS, 1)
    mlakv_decode90g_kernel(const mlakv_decode_params p) {
#ifdef MLAKV_DEC90_DEVICE
    typedef mlakv_dec90g_shape<FMT> SH;
    constexpr int NK = SH::NK, HP = SH::HP, REC = SH::REC, CH = REC / 16;

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (mlakv_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    uint8_t *stg = Ks + SH::KBUF;                                                 /* [2][64] */
    int32_t *sidx = reinterpret_cast<int32_t *>(stg + 2 * (size_t)NK * REC);      /* [2][64] */
    uint32_t *vk = reinterpret_cast<uint32_t *>(sidx + 2 * NK); /* [8]: records 8k .. 8k + 7 */
    float *alpha = reinterpret_cast<float *>(vk + 8);           /* [2][HP] */
    float *red_l = alpha + 2 * HP;                              /* [2][HP] */
    float *red_m = red_l + 2 * HP;
    uint64_t *p_ready = reinterpret_cast<uint64_t *>(red_m + HP); /* [0], [1] P(i); [2] stats */

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127;
    /* the head blocks of a query row are neighbours in blockIdx.x (as v5) */
    const int bt = (int)blockIdx.x / p.head_blocks, hb = (int)blockIdx.x - bt * p.head_blocks;
    const int split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;
    int cbeg, cend, ntiles;
    mlakv_dec_split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    if (tid == 0) {
        mlakv_mbar_init(p_ready, 128);
        mlakv_mbar_init(p_ready + 1, 128);
        mlakv_mbar_init(p_ready + 2, 128);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
    constexpr int FULL = MLAKV_BARD_FULL, EMPTY = MLAKV_BARD_EMPTY;

    {
        /* ============ producers (warpgroup 0 records 0..31, 2 records 32..63; each in its own
         * branch below, so that ptxas gives each its own register limit) ============ */
        const int side = wg >> 1, part = lane >> 3;
        const int w0 = 32 * side + 8 * (wt >> 5); /* this warp's first record of a tile */
        const int key = w0 + (lane & 7);
        auto rec_at = [&](int s, int u) { return stg + ((size_t)s * NK + w0 + u) * REC; };
        /* cp.async group of `tile` into slot tile % 2: its records (indices already in the
         * slot's index row) and the indices of tile + 2; returns the valid bits of the 8 */
        auto issue = [&](int tile) -> uint32_t {
            const int s = tile & 1;
            uint32_t okb = 0;
            if (tile < ntiles) {
                const int myidx = lane < 8 ? sidx[s * NK + w0 + lane] : -1;
                int64_t off;
                const bool ok = mlakv_dec_rec_offset<REC>(p, myidx, off);
                okb = __ballot_sync(0xffffffffu, ok) & 0xFFu;
                const uint32_t olo = (uint32_t)off, ohi = (uint32_t)(off >> 32);
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const int64_t offu = (int64_t)__shfl_sync(0xffffffffu, olo, u) |
                                         (int64_t)__shfl_sync(0xffffffffu, ohi, u) << 32;
                    if (((okb >> u) & 1u) && lane < CH)
                        mlakv_cp_async16(rec_at(s, u) + 16 * lane, p.base + offu + 16 * lane);
                }
            }
            __syncwarp(); /* sidx read by lanes 0..7 before the copies below overwrite it */
            if (lane < 8) {
                const int pos = cbeg + (tile + 2) * NK + w0 + lane;
                if (tile + 2 < ntiles && pos < cend) mlakv_cp_async4(&sidx[s * NK + w0 + lane], idx_row + pos);
                else sidx[s * NK + w0 + lane] = -1;
            }
            mlakv_cp_async_commit();
            return okb;
        };
        /* tile `tile` from its slot into the K buffer (after EMPTY from tile 1 on), then FULL;
         * the slot's next copies (tile + 2) are issued as soon as it has been read */
        uint32_t ok0 = 0u, ok1 = 0u; /* valid bits of the records in slots 0 and 1 */
        auto put = [&](int tile) {
            const int s = tile & 1;
            mlakv_cp_async_wait<1>(); /* this lane's copies of `tile` (tile + 1's may fly) */
            __syncwarp();             /* ... and the other lanes' */
            mlakv_dec90d_rec<FMT> r;
            const uint32_t okb = s ? ok1 : ok0;
            r.ok = (okb >> (lane & 7)) & 1u;
            const uint8_t *g = rec_at(s, lane & 7);
            mlakv_dec90d_fill<FMT>(r, part, [&](int o) { return *reinterpret_cast<const uint4 *>(g + o); },
                                   [&](int o) { return *reinterpret_cast<const uint2 *>(g + o); });
            __syncwarp(); /* every lane has read the slot before tile + 2's copies into it */
            const uint32_t next = issue(tile + 2);
            if (s) ok1 = next;
            else ok0 = next;
            if (tile >= 1) mlakv_bar_sync(EMPTY, MLAKV_DEC90D_THREADS);
            mlakv_dec90d_dequant<FMT>(r, part, Ks, key);
            if (lane == 0) vk[key >> 3] = okb;
            mlakv_fence_proxy_async(); /* K rows (and Q, first time) to the tensor cores */
            mlakv_bar_arrive(FULL, MLAKV_DEC90D_THREADS);
        };
        /* the slots' first tiles: indices by plain loads, then their copies (Q's cp.async, by
         * warpgroup 0, joins the first group) */
        auto start = [&]() {
            if (lane < 8)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int pos = cbeg + j * NK + w0 + lane;
                    sidx[j * NK + w0 + lane] = (j < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
                }
            __syncwarp();
            ok0 = issue(0);
            ok1 = issue(1);
        };
        if (wg == 0) {
            mlakv_dec90d_setreg<MLAKV_DEC90D_PROD_REGS>();
            mlakv_dec_load_q<HP, 128>(p, b, t, h0, wt, [&](int rr, int j) {
                return Qs + (j >> 3) * (HP * 128) + mlakv_sw128(rr, j & 7);
            });
            start();
            for (int it = 0; it < ntiles; ++it) put(it);
            mlakv_cp_async_wait<0>();
        } else if (wg == 2) {
            /* warpgroup 2: O[:, 256:512) += P V(i), then its half of tile i + 1 */
            mlakv_dec90d_setreg<MLAKV_DEC90D_V_REGS>();
            start();
            const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
            float o[128];
#pragma unroll
            for (int i = 0; i < 128; i++) o[i] = 0.0f;
            const uint32_t ks_a = mlakv_smem_addr(Ks);
            if (ntiles > 0) put(0);
            for (int it = 0; it < ntiles; ++it) {
                mlakv_mbar_wait(p_ready + (it & 1), (uint32_t)(it >> 1) & 1u); /* P(it), alpha(it) */
                mlakv_dec90_rescale(o, alpha[(it & 1) * HP + r0], alpha[(it & 1) * HP + r0 + 8]);
                mlakv_dec90_pv_issue<NK>(o, ks_a + 8 * NK * 128, ks_a + 4 * (NK * 128));
                mlakv_wgmma_wait0();
                mlakv_reg_fence(o);
                if (it + 1 < ntiles) put(it + 1);
            }
            mlakv_wgmma_wait0();
            mlakv_reg_fence(o);
            mlakv_mbar_wait(p_ready + 2, 0);
            mlakv_dec90_store_rows(p, o, red_l, 1, lane, r0, cq, h0, bt, split, red_m[r0], red_m[r0 + 8]);
            mlakv_cp_async_wait<0>();
        }
    }
    if (wg == 1) {
        /* ================= warpgroup 1: S, softmax, P, O[:, 0:256) += P V ================= */
        mlakv_dec90d_setreg<MLAKV_DEC90D_S_REGS>();
        const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
        float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; i++) o[i] = 0.0f;
        const uint32_t qs_a = mlakv_smem_addr(Qs), ks_a = mlakv_smem_addr(Ks);
        float s[32];
        float al0 = 1.0f, al1 = 1.0f;
        for (int it = 0; it < ntiles; ++it) {
            mlakv_bar_sync(FULL, MLAKV_DEC90D_THREADS);
            mlakv_wgmma_fence();
            {
                const uint32_t dq0 = mlakv_gdesc_lo(qs_a, 16), dk0 = mlakv_gdesc_lo(ks_a, 16);
                const uint32_t dhi = mlakv_gdesc_hi(1024);
#pragma unroll
                for (int kk = 0; kk < 36; kk++) {
                    const uint32_t off_q = ((kk >> 2) * (HP * 128) + (kk & 3) * 32) >> 4;
                    const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                    if (kk == 0)
                        mlakv_wgmma_m64n64<false>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                    else
                        mlakv_wgmma_m64n64<true>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                }
            }
            mlakv_wgmma_commit();
            mlakv_wgmma_wait0();
            mlakv_reg_fence(s);
            const uint4 w0 = *reinterpret_cast<const uint4 *>(vk);
            const uint4 w1 = *reinterpret_cast<const uint4 *>(vk + 4);
            const uint64_t vm = (uint64_t)(w0.x | w0.y << 8 | w0.z << 16 | w0.w << 24) |
                                (uint64_t)(w1.x | w1.y << 8 | w1.z << 16 | w1.w << 24) << 32;
            mlakv_dec90d_softmax(p.sm_scale_log2, s, vm, r0, cq, Ks + 8 * NK * 128, m_run0, m_run1,
                                 l_run0, l_run1, al0, al1);
            if ((lane & 3) == 0) {
                alpha[(it & 1) * HP + r0] = al0;
                alpha[(it & 1) * HP + r0 + 8] = al1;
            }
            mlakv_fence_proxy_async();
            mlakv_mbar_arrive(p_ready + (it & 1));
            mlakv_dec90_rescale(o, al0, al1);
            mlakv_dec90_pv_issue<NK>(o, ks_a + 8 * NK * 128, ks_a);
            mlakv_wgmma_wait0();
            mlakv_reg_fence(o);
            if (it + 1 < ntiles) mlakv_bar_arrive(EMPTY, MLAKV_DEC90D_THREADS);
        }
        if ((lane & 3) == 0) {
            red_l[r0] = l_run0;
            red_l[r0 + 8] = l_run1;
            red_l[HP + r0] = 0.0f;
            red_l[HP + r0 + 8] = 0.0f;
            red_m[r0] = m_run0;
            red_m[r0 + 8] = m_run1;
        }
        __syncwarp();
        mlakv_mbar_arrive(p_ready + 2);
        mlakv_wgmma_wait0();
        mlakv_reg_fence(o);
        mlakv_dec90_store_rows(p, o, red_l, 0, lane, r0, cq, h0, bt, split, m_run0, m_run1);
    }
#endif /* MLAKV_DEC90_DEVICE */
}

template <int FMT>
static cudaError_t mlakv_decode90g_launch(const mlakv_decode_params *p, dim3 grid,
                                          cudaStream_t stream) {
    const size_t sm = mlakv_dec90g_shape<FMT>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(mlakv_decode90g_kernel<FMT>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    if ((uint64_t)grid.x * grid.y > 0x7FFFFFFFu) return cudaErrorInvalidValue;
    return mlakv_launch_pdl(mlakv_decode90g_kernel<FMT>, dim3(grid.x * grid.y, 1, grid.z),
                            dim3(MLAKV_DEC90D_THREADS), sm, stream, p);
}

#endif
