/* The wide-head kernel: warp-specialized wgmma decode with a direct (global -> registers -> bf16
 * tile) gather, NVFP4 records, 33..128 heads in 64-head blocks, 64-record tiles, sm_90a.
 *
 * Why: a design with one producer warpgroup staging raw records by cp.async and two consumers
 * computing S over 32-record halves was bound by shared-memory traffic and latency chains, not by
 * the tensor cores: its S wgmma re-read Q's 72 KB for every 32-record tile, and its raw stage
 * was written (with 5x wavefront waste) and read again before the bf16 tile. Here:
 *   - warpgroup 0 (producer) loads records 0..31 of each tile straight into registers
 *     (ld.global.nc, 4 threads per record, each 64 contiguous nibble bytes, their 8 scale bytes
 *     and a RoPE share: 7 loads; two tiles in flight), de-quantizes them and stores
 *     bf16 rows of the K tile [64 x 576] (128-byte swizzle, conflict-free 16-byte stores) into
 *     one of two buffers; no raw stage in shared memory;
 *   - warpgroup 1 computes all of S = Q K^T [64 heads x 64 records] (36 wgmma m64n64k16: Q read
 *     once per 64 records), the online softmax (each row's 64 columns live in one thread quad:
 *     no exchange; softmax), P (bf16) and the rescale factors, then
 *     O[:, 0:256) += P V; it waits for that P V before it takes the next tile, so the buffer goes
 *     back to the producers a whole S + softmax before it is needed again;
 *   - warpgroup 2 waits for P(i) and computes O[:, 256:512) += P V(i); between those steps it
 *     gathers and de-quantizes records 32..63 of tile i + 2 (it would otherwise idle).
 * P(i) is written into the RoPE column block of tile i's K buffer (64 x 128 B, the P tile's
 * shape; dead once S(i) has read it), so P is double-buffered with the K tiles for free.
 * Record loads carry an L2 evict-first policy when no other CTA reads the records (one head
 * block), so the code, Q and indices stay in L2; one-split bf16 outputs leave through shared
 * memory as whole 512-byte row pieces (store_rows).
 * Shared memory: Q 72 KB + 2 K buffers 144 KB + 2 KB. Registers (setmaxnreg, config.h's
 * producer_regs, score_regs, value_regs): warpgroup 1 needs more than the 168 of the launch
 * cap. Same numerics as the other kernels (S in fp32, P rounded to bf16, fp32 O) except 2^x by ex2.approx.ftz. */
#ifndef MLAKV_CUDA_DECODE_WIDE_KERNEL_CUH
#define MLAKV_CUDA_DECODE_WIDE_KERNEL_CUH

#include "cuda/common/launch.cuh"
#include "cuda/decode/common/producer_sm90.cuh"
#include "cuda/decode/wide/config.h"

namespace mlakv::decode::wide {

#ifdef MLAKV_SM90A_DEVICE
/* Online softmax of one warpgroup that holds a whole 64-column S tile (accumulator fragment:
 * s[4j + {0, 1}] row r0, s[4j + {2, 3}] row r0 + 8, columns 8j + cq + {0, 1}); valid: bit k set
 * when record k of the tile is valid (all-valid tiles skip the masking). Scales to the log2
 * domain, updates the running max / sum of rows r0 and r0 + 8, writes P (bf16) into the swizzled
 * [64 x 64] tile at pt and returns the O rescale factors. Same arithmetic as
 * softmax_2wg except 2^x by ex2.approx.ftz (P below 2^-126 of the row max flushes to 0),
 * the lazy running max (below) and no branches: a row with no valid column so far (max -inf)
 * gets p = 0, alpha = 0. */
template <bool TS = false>
__device__ __forceinline__ void softmax(float c, float (&s)[32], uint64_t valid,
                                        int r0, int cq, uint8_t *pt, float &m_run0,
                                        float &m_run1, float &l_run0, float &l_run1,
                                        float &al0, float &al1,
                                        const float *tsc = nullptr) {
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (valid == ~0ull) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[4 * j + e] *= c;
                s[4 * j + 2 + e] *= c;
                mx0 = fmaxf(mx0, s[4 * j + e]);
                mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
            }
    } else {
        const uint64_t vq = valid >> cq;
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = (vq >> (8 * j + e)) & 1;
                s[4 * j + e] = ok ? s[4 * j + e] * c : -INFINITY;
                s[4 * j + 2 + e] = ok ? s[4 * j + 2 + e] * c : -INFINITY;
                mx0 = fmaxf(mx0, s[4 * j + e]);
                mx1 = fmaxf(mx1, s[4 * j + 2 + e]);
            }
    }
    quad_max(mx0, mx1);
    /* lazy rescaling: the running max (the reference of P and of O) moves only when the tile's
     * max exceeds it by more than MLAKV_LAZY_RESCALE_LOG2 (log2 units), so P stays below
     * 2^MLAKV_LAZY_RESCALE_LOG2 and most tiles have alpha = 1 (no O rescale in either
     * consumer); O / l and the lse do not depend on the reference. A row's first valid tile
     * always moves it (-inf + x = -inf). The cost: the row's largest p is no longer exactly 1,
     * so its bf16 rounding (<= 2^-9 relative) reaches the output of a row that one candidate
     * dominates (l sums the unrounded p, as FlashMLA and the engine mode do); summing the
     * rounded P instead moved the lse off the engine's by up to 9e-4. */
    const float th = MLAKV_LAZY_RESCALE_LOG2;
    const float mn0 = mx0 > m_run0 + th ? mx0 : m_run0, mn1 = mx1 > m_run1 + th ? mx1 : m_run1;
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    al0 = ex2(m_run0 - mu0);
    al1 = ex2(m_run1 - mu1);
    float sum0 = 0.0f, sum1 = 0.0f;
    uint8_t *row = pt + r0 * 128 + 2 * cq; /* row r0 + 8: + 1024, same swizzle (r0 & 7) */
    const int x = r0 & 7;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float p0 = ex2(s[4 * j] - mu0), p1 = ex2(s[4 * j + 1] - mu0);
        const float p2 = ex2(s[4 * j + 2] - mu1), p3 = ex2(s[4 * j + 3] - mu1);
        sum0 += p0 + p1;
        sum1 += p2 + p3;
        uint8_t *a = row + ((j ^ x) << 4);
        if constexpr (TS) { /* P times its column's token scale (V is stored without it); l
                               sums the unscaled p */
            const float2 f = *reinterpret_cast<const float2 *>(tsc + 8 * j + cq);
            *reinterpret_cast<uint32_t *>(a) = f32x2_to_bf16x2(p0 * f.x, p1 * f.y);
            *reinterpret_cast<uint32_t *>(a + 1024) = f32x2_to_bf16x2(p2 * f.x, p3 * f.y);
        } else {
            *reinterpret_cast<uint32_t *>(a) = f32x2_to_bf16x2(p0, p1);
            *reinterpret_cast<uint32_t *>(a + 1024) = f32x2_to_bf16x2(p2, p3);
        }
    }
    row_update(sum0, sum1, al0, al1, mn0, mn1, m_run0, m_run1, l_run0, l_run1);
}
#endif /* MLAKV_SM90A_DEVICE */

#ifdef MLAKV_SM90A_DEVICE
/* the wide-head kernel's epilogue for one consumer warpgroup c (output columns 256 c .. 256 c + 255) of a
 * one-split launch: the normalized bf16 rows go through shared memory st (64 rows x 512 B;
 * 16-byte chunks XOR-swizzled by row: conflict-free both ways), then out as whole row pieces,
 * one 512-byte piece per warp store (4 full lines). Storing the accumulator fragments directly
 * (16 bytes of 8 rows per warp store: 8 write requests each, ~4,000 per CTA) took 4-6 us per
 * CTA after its last P V; this takes ~2.5 (per-CTA stamps). bar: a named barrier of the
 * warpgroup's 128 threads. */
template <bool SC>
__device__ __forceinline__ void store_rows(const Params &p, int bar,
                                           const float (&o)[128], const float *red_l,
                                           int c, int wt, int r0, int cq, int h0,
                                           int bt, float m_run0, float m_run1,
                                           uint8_t *st) {
    constexpr int HP = 64;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = r0 + 8 * half, h = h0 + row, x = row & 7;
        float so = 0.0f, lse; /* padding heads: staged, never written out */
        if (h < p.heads) {
            norm_out<SC>(p, h, half ? m_run1 : m_run0, red_l[row] + red_l[HP + row], so, lse);
            if (c == 0 && (wt & 3) == 0) p.lse[(int64_t)bt * p.heads + h] = lse;
        }
        uint8_t *srow = st + row * 512 + 2 * cq;
        row_bf16(o, half, so, [&](int j, uint32_t w) { /* chunk j */
            *reinterpret_cast<uint32_t *>(srow + ((j ^ x) << 4)) = w;
        });
    }
    bar_sync(bar, 128);
#pragma unroll 4
    for (int i = 0; i < 16; i++) { /* 64 rows x 32 chunks; a warp takes one row */
        const int k = i * 128 + wt, row = k >> 5, ch = k & 31, h = h0 + row;
        const uint4 v = *reinterpret_cast<const uint4 *>(st + row * 512 + ((ch ^ (row & 7)) << 4));
        if (h < p.heads)
            *reinterpret_cast<uint4 *>(p.out + ((int64_t)bt * p.heads + h) * kVDim + 256 * c + 8 * ch) = v;
    }
}
#endif /* MLAKV_SM90A_DEVICE */

/* A 2-CTA cluster variant for
 * 128 heads (the two head blocks of a row sharing the de-quantized tiles through st.async) was
 * measured slower in every form (with the current registers: 454 vs 357-360 us at b=128 s_q=2
 * h=128, 119-120 vs 93-94 at b=64 h=128). */
template <int FMT, bool SC = false>
__global__ void __launch_bounds__(kHandshakeThreads, 1)
    kernel(const Params p) {
#ifdef MLAKV_SM90A_DEVICE
    typedef Shape<FMT> SH;
    constexpr int NK = SH::NK, HP = SH::HP;
    static_assert(producer_regs(FMT) + score_regs(FMT) + value_regs(FMT) <=
                      3 * 168,
                  "wide-head kernel registers: setmaxnreg.inc only takes what the other warpgroups released");
    constexpr int KBUF = (int)SH::KBUF;
    /* the staged epilogue (store_rows) for bf16 outputs (one split); the split
     * partials (fp32) and the two-level record keep the direct stores, which measured faster
     * there (b=1 h=64 11.6 vs 13.1 us; two-level +7 %). All 384 threads meet on
     * kBarEpilogueAll when it is taken, so the producers and consumers test this one
     * condition (evaluated where used: kept live across the loops it moved ptxas's schedule) */
    auto staged_out = [&]() { return FMT != 3 && p.nsplit == 1; };

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    /* [2][8] record-valid masks: word k of a buffer holds bits of records 8k .. 8k + 7 */
    uint32_t *vk = reinterpret_cast<uint32_t *>(Ks + 2 * SH::KBUF);
    float *alpha = reinterpret_cast<float *>(vk + 32);      /* [2][HP] O rescale of tile i */
    float *red_l = alpha + 2 * HP;                          /* [2][HP] */
    float *red_m = red_l + 2 * HP;
    /* mbarriers: [0], [1] P(i) ready by tile parity, [2] warpgroup 1's row statistics */
    uint64_t *p_ready = reinterpret_cast<uint64_t *>(red_m + HP);
    constexpr bool TSP = SH::TSS > 0; /* two-level: token scale on S and P, not in K */
    float *tss = reinterpret_cast<float *>(p_ready + 3); /* [2][NK] token scales (TSP) */
    (void)tss;

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127;
    /* one-CTA launches with several head blocks run the head blocks of a query row as
     * neighbours in blockIdx.x (see launch_grid): they read the same records,
     * and neighbours run at the same time, so the second reads hit L2 */
    const bool paired = gridDim.y == 1 && p.head_blocks > 1;
    const int bt = paired ? (int)blockIdx.x / p.head_blocks : (int)blockIdx.x;
    const int hb = paired ? (int)blockIdx.x - bt * p.head_blocks : (int)blockIdx.y;
    const int split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;
    const int h0 = hb * HP;

    int cbeg, cend, ntiles;
    split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);
    if (tid == 0) { /* P(i) ready: warpgroup 1's 128 threads arrive, warpgroup 2 waits */
        mbar_init(p_ready, 128);
        mbar_init(p_ready + 1, 128);
        mbar_init(p_ready + 2, 128); /* row sums / maxima for the epilogue */
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    auto full_wait = [&](int tile) { /* warpgroup 1 */
        bar_sync(kBarFull + (tile & 1), kHandshakeThreads);
    };
    auto empty_wait = [&](int tile) { /* producers, before writing `tile` (>= 2) */
        bar_sync(kBarEmpty + (tile & 1), kHandshakeThreads);
    };
    auto empty_signal = [&](int tile) { /* warpgroup 1, its P V of `tile` done */
        if (wg == 1) bar_arrive(kBarEmpty + (tile & 1), kHandshakeThreads);
    };

    /* ---- the gather + de-quantization of one half of each tile (32 records, 4 threads per
     * record): warpgroup 0 does records 0..31, warpgroup 2 records 32..63 between its P V
     * steps (it would otherwise idle while warpgroup 1 runs S and the softmax) */
    const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
    const int part = lane >> 3; /* 16-byte column of the record's parts */
    auto load_idx = [&](int tile, int key) -> int {
        const int pos = cbeg + tile * NK + key;
        return (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
    };
    /* record of `tile` into registers (its index in `in`) and the next tile's index. For the
     * 432-B records the index load goes first (b=128 h=64 -2.4 %);
     * the 368-B records measured slower that way (fp8 RoPE +6 %) and keep the record loads
     * first. */
    auto load_rec = [&](HeldRecord<FMT> &r, int idx, int tile) {
        if (tile < ntiles) load_record<FMT>(p, idx, part, r);
    };
    auto fetch = [&](HeldRecord<FMT> &r, int &in, int tile, int key) {
        int next = -1;
        if constexpr (FMT == 1) next = load_idx(tile + 1, key);
        load_rec(r, in, tile);
        if constexpr (FMT != 1) next = load_idx(tile + 1, key);
        in = next;
    };
    /* E2M1 permute tables, in vector registers for the formats of pin_tables */
    constexpr bool SFB = scale_bits(FMT);
    constexpr uint32_t HI_A = SFB ? kE2m1HiA120 : kE2m1HiA;
    uint32_t lut_lo = kE2m1LoA, lut_hi = HI_A;
    if constexpr (pin_tables(FMT))
        e2m1_tables_pinned(threadIdx.x, p.opaque_zero, lut_lo, lut_hi, HI_A);
    /* the held record of `tile` into its K buffer, then FULL */
    auto put = [&](const HeldRecord<FMT> &r, int tile, int key) {
        uint8_t *kb = Ks + (tile & 1) * KBUF;
        const uint32_t okb = __ballot_sync(0xffffffffu, r.ok) & 0xFFu; /* lanes 0..7: part 0 */
        uint32_t *vw = vk + (tile & 1) * 8 + (key >> 3);
        dequant_store<FMT, SFB>(r, part, kb, key, lut_lo, lut_hi);
        if constexpr (TSP) {
            if (part == 0) tss[(tile & 1) * NK + key] = r.token_scale();
        }
        if (lane == 0) *vw = okb;
        fence_proxy_async(); /* K rows (and Q, first time) to the tensor cores */
        bar_arrive(kBarFull + (tile & 1), kHandshakeThreads);
    };

    if (wg == 0) {
        /* ================= producer (records 0..31) ================= */
        set_regs<producer_regs(FMT)>();
        const int key = 8 * (wt >> 5) + (lane & 7);
        HeldRecord<FMT> ra, rb; /* records of tiles it and it + 1 (two tiles in flight) */
        /* the first three tiles' indices at once: both first records are requested after one
         * index latency (fetch would load each tile's next index before its record) */
        const int in0 = load_idx(0, key), in1 = load_idx(1, key);
        int in = load_idx(2, key);
        /* Q [64 heads x 576] into nine swizzled 64-column blocks */
        load_q<HP, 128, SC>(p, b, t, h0, wt, [&](int rr, int j) {
            return Qs + (j >> 3) * (HP * 128) + sw128(rr, j & 7);
        });
        cp_async_commit();
        load_rec(ra, in0, 0);
        load_rec(rb, in1, 1);
        cp_async_wait<0>();
        /* the consumers release tile it - 2's buffer as soon as its P V is done; the record of
         * tile it + 2 is requested as soon as tile it's registers are free */
        for (int it = 0; it < ntiles; it += 2) {
            if (it >= 2) empty_wait(it);
            put(ra, it, key);
            fetch(ra, in, it + 2, key);
            if (it + 1 < ntiles) {
                if (it >= 2) empty_wait(it + 1);
                put(rb, it + 1, key);
                fetch(rb, in, it + 3, key);
            }
        }
        if (staged_out()) bar_sync(kBarEpilogueAll, kHandshakeThreads); /* epilogue */
    } else {
        /* ================= consumers ================= */
        const int c = wg - 1;
        const int r0 = 16 * (wt >> 5) + (lane >> 2), cq = 2 * (lane & 3);
        float m_run0 = -INFINITY, m_run1 = -INFINITY, l_run0 = 0.0f, l_run1 = 0.0f;
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; i++) o[i] = 0.0f;
        const uint32_t qs_a = smem_addr(Qs), ks_a = smem_addr(Ks);
        /* P of tile i: the RoPE column block of its K buffer, dead once S(i) has read it */
        constexpr int P_OFF = 8 * NK * 128;
        auto pv_issue = [&](int i, int vcol) { /* O += P(i) V(i)[:, vcol .. vcol + 256) */
            const uint32_t kb_a = ks_a + (i & 1) * KBUF;
            issue_pv<NK>(o, kb_a + P_OFF, kb_a + (vcol / 64) * (NK * 128));
        };
        /* both consumers' rows: the row sums and maxima are warpgroup 1's (red_l, red_m; to
         * warpgroup 2 through the third mbarrier) */
        auto finish = [&]() {
            wgmma_wait0(); /* nothing in flight; said here, on the uniform path */
            reg_fence(o);
            if (c == 1) {
                mbar_wait(p_ready + 2, 0);
                m_run0 = red_m[r0];
                m_run1 = red_m[r0 + 8];
            }
            if (staged_out()) { /* staged through dead shared memory: warpgroup 1 in Q (its last
                                 S is done), warpgroup 2 in the K buffer the last tile did not
                                 use (both P V of the tile before are done); the barrier orders
                                 the producers' last K-tile stores first */
                bar_sync(kBarEpilogueAll, kHandshakeThreads);
                store_rows<SC>(p, kBarEpilogue + c, o, red_l, c, wt, r0, cq, h0, bt, m_run0,
                           m_run1, c == 0 ? Qs : Ks + (ntiles & 1) * KBUF);
            } else
                decode::store_rows<SC>(p, o, red_l, c, lane, r0, cq, h0, bt, split, m_run0, m_run1);
        };
        if (c == 0) {
            /* warpgroup 1, per tile i: S(i) landed -> softmax -> P(i) -> O += P V(i), waited for,
             * buffer released -> FULL(i + 1) -> S(i + 1) issued (the producers get S + softmax
             * of a tile to refill the released buffer) */
            set_regs<score_regs(FMT)>();
            float s[32];
            /* k16 steps k0 .. k1 - 1 of S(i) = Q K(i)^T into s (step 0 overwrites: no zeroing
             * of s inside the pipeline stage); the caller fences and commits */
            auto s_steps = [&](int i, int k0, int k1) {
                const uint32_t dq0 = wgmma_desc_lo(qs_a, 16);
                const uint32_t dk0 = wgmma_desc_lo(ks_a + (i & 1) * KBUF, 16);
                const uint32_t dhi = wgmma_desc_hi(1024);
#pragma unroll
                for (int kk = k0; kk < k1; kk++) {
                    const uint32_t off_q = ((kk >> 2) * (HP * 128) + (kk & 3) * 32) >> 4;
                    const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                    if (kk == 0)
                        wgmma_m64n64<false>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                    else
                        wgmma_m64n64<true>(s, dq0 + off_q, dhi, dk0 + off_k, dhi);
                }
            };
            auto s_issue = [&](int i) { /* S(i): one chain of 36 k16 steps (two-level: the 32
                                           latent ones; the RoPE steps follow its scaling) */
                wgmma_fence();
                s_steps(i, 0, TSP ? 32 : 36);
                wgmma_commit();
            };
            float al0 = 1.0f, al1 = 1.0f;
            if (ntiles > 0) {
                full_wait(0);
                s_issue(0);
            }
            for (int it = 0; it < ntiles; ++it) {
                wgmma_wait0(); /* S(it) */
                reg_fence(s);
                if constexpr (TSP) {
                    /* two-level record: S = s_t (Q K'^T over the 512 latent columns) + the RoPE
                     * columns' product, K' being the latent without its token scale s_t */
                    const float *tsc = tss + (it & 1) * NK;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        const float2 f = *reinterpret_cast<const float2 *>(tsc + 8 * j + cq);
                        s[4 * j] *= f.x;
                        s[4 * j + 1] *= f.y;
                        s[4 * j + 2] *= f.x;
                        s[4 * j + 3] *= f.y;
                    }
                    wgmma_group_sync(s, [&] { s_steps(it, 32, 36); });
                }
                const uint4 w0 = *reinterpret_cast<const uint4 *>(vk + (it & 1) * 8);
                const uint4 w1 = *reinterpret_cast<const uint4 *>(vk + (it & 1) * 8 + 4);
                const uint64_t vm =
                    (uint64_t)(w0.x | w0.y << 8 | w0.z << 16 | w0.w << 24) |
                    (uint64_t)(w1.x | w1.y << 8 | w1.z << 16 | w1.w << 24) << 32;
                if constexpr (TSP) { /* on a copy: a non-wgmma write of s after its second
                                        chain serializes every chain (ptxas C7515) */
                    float sc[32];
#pragma unroll
                    for (int k = 0; k < 32; k++) sc[k] = s[k];
                    softmax<true>(p.sm_scale_log2, sc, vm, r0, cq,
                                  Ks + (it & 1) * KBUF + P_OFF, m_run0, m_run1,
                                  l_run0, l_run1, al0, al1, tss + (it & 1) * NK);
                } else {
                    softmax(p.sm_scale_log2, s, vm, r0, cq,
                            Ks + (it & 1) * KBUF + P_OFF, m_run0, m_run1, l_run0,
                            l_run1, al0, al1);
                }
                if ((lane & 3) == 0) {
                    alpha[(it & 1) * HP + r0] = al0;
                    alpha[(it & 1) * HP + r0 + 8] = al1;
                }
                fence_proxy_async();
                mbar_arrive(p_ready + (it & 1));
                rescale_o(o, al0, al1); /* P V(it - 1) was waited for */
                pv_issue(it, 0);
                /* P V(it) first: the buffer goes back to the producers without waiting for
                 * the next tile (warpgroup 2's P V(it) runs meanwhile) */
                wgmma_wait0();
                reg_fence(o);
                if (it + 2 < ntiles) empty_signal(it);
                if (it + 1 < ntiles) {
                    full_wait(it + 1);
                    s_issue(it + 1);
                }
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
            mbar_arrive(p_ready + 2);
            finish();
        } else {
            /* warpgroup 2: O[:, 256:512) += P V(i), and records 32..63 of tile i + 2 */
            set_regs<value_regs(FMT)>();
            const int key = 32 + 8 * (wt >> 5) + (lane & 7);
            HeldRecord<FMT> r;
            int in = load_idx(0, key);
            fetch(r, in, 0, key);
            for (int it = 0; it < 2 && it < ntiles; ++it) {
                put(r, it, key);
                fetch(r, in, it + 1, key);
            }
            for (int it = 0; it < ntiles; ++it) {
                mbar_wait(p_ready + (it & 1), (uint32_t)(it >> 1) & 1u); /* P(it), alpha(it) */
                rescale_o(o, alpha[(it & 1) * HP + r0], alpha[(it & 1) * HP + r0 + 8]);
                pv_issue(it, 256);
                wgmma_wait0();
                reg_fence(o);
                if (it + 2 < ntiles) {
                    empty_wait(it + 2);
                    put(r, it + 2, key);
                    fetch(r, in, it + 3, key);
                }
            }
            finish();
        }
    }
#endif /* MLAKV_SM90A_DEVICE */
}

template <int FMT, bool SC>
static cudaError_t launch_grid(const Params *p, dim3 grid,
                               cudaStream_t stream) {
    const size_t sm = Shape<FMT>::SMEM;
    cudaError_t err = cudaFuncSetAttribute(kernel<FMT, SC>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    /* the head blocks of a query row next to each other in x (they read the same records, the
     * second time from L2); the (row, head block) grid only where x would overflow */
    if (grid.y > 1 && (uint64_t)grid.x * grid.y <= 0x7FFFFFFFu)
        grid = dim3(grid.x * grid.y, 1, grid.z);
    return launch_pdl(kernel<FMT, SC>, grid, dim3(kHandshakeThreads), sm,
                      stream, p);
}

/* The NVFP4 records' wide-head kernel (33..128 heads). */
template <int FMT>
static cudaError_t launch(const Params *p, cudaStream_t stream) {
    if (p->head_groups != kMaxHeadGroups) return cudaErrorInvalidValue; /* 64-head blocks */
    dim3 grid((unsigned)(p->batch * p->s_q), (unsigned)p->head_blocks, (unsigned)p->nsplit);
    if constexpr (FMT == 1 || FMT == 2) /* the static NVFP4 records with a latent scale */
        if (p->q_rope_scaled) return launch_grid<FMT, true>(p, grid, stream);
    return launch_grid<FMT, false>(p, grid, stream);
}

} // namespace mlakv::decode::wide

#endif
