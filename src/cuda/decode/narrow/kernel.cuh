/* The narrow-head kernel: sparse MLA decode for 1..32 heads on sm_90a, NVFP4 records. The
 * wide-head kernel's producers (decode/common/producer_sm90.cuh) with a transposed ("swap AB")
 * consumer, so that the 8..32 heads sit in the N dimension of the wgmma instead of padding M = 64.
 *
 * Why: de-quantizing each record once into a bf16 tile that two wgmma products read from shared
 * memory keeps two producer warpgroups busy, but the wide-head layout needs 64 heads of rows;
 * de-quantizing every record twice into register A fragments (S and P V) on one warpgroup per
 * CTA measured no faster than the mma.sync kernel. Here, per CTA (one query row, all its heads as
 * N = 8 / 16 / 32 columns, one split), 384 threads:
 *   - warpgroups 0 and 2 (producers) gather records 0..31 and 32..63 of each 64-record tile,
 *     two tiles ahead: up to 16 heads by cp.async into a raw stage (produce_staged),
 *     at 32 heads straight into registers (load_record); they store them de-quantized
 *     (dequant_store) into one of two bf16 K buffers [64 x 576];
 *   - warpgroup 1 computes S^T [64 records x N] = K Q^T (36 wgmma m64nNk16, A = the K tile,
 *     B = Q [N x 576], both K-major from shared memory), the online softmax over each column
 *     against lazy reference maxima (they move only when a score exceeds them by more than 2^8,
 *     found by one barrier with an OR reduction; then the tile's column maxima go through
 *     shuffles and shared memory across the 4 warps; each thread keeps its own partial column
 *     sums, reduced once at the end), writes P^T (bf16, [N x 64]) into the tile's dead RoPE
 *     block, then O^T [512 x N] += V^T P^T (32 wgmma m64nNk16, A = V^T = the K tile read
 *     MN-major with the transpose bit, B = P^T K-major). O^T: 4N fp32 registers.
 * Same numerics as the wide-head kernel (S in fp32 by wgmma, P rounded to bf16, fp32 O, 2^x by
 * ex2.approx.ftz). */
#ifndef MLAKV_CUDA_DECODE_NARROW_KERNEL_CUH
#define MLAKV_CUDA_DECODE_NARROW_KERNEL_CUH

#include "cuda/common/launch.cuh"
#include "cuda/decode/common/producer_sm90.cuh"
#include "cuda/decode/narrow/config.h"

namespace mlakv::decode::narrow {

#ifdef MLAKV_SM90A_DEVICE
/* D[64 x N] (fp32, registers) (+)= A (smem desc) * B (smem desc), bf16 operands; B K-major, A
 * K-major (TA 0) or MN-major (TA 1: transpose bit). ACC 0: D = A B (no zeroing of D needed).
 * Overloads for N = 8, 16, 32 by the accumulator's size. */
template <int ACC, int TA>
__device__ __forceinline__ void wgmma_ss(float (&d)[4], uint32_t a_lo, uint32_t a_hi,
                                         uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %8, 0;\n"
        "mov.b64 da, {%4, %5};\nmov.b64 db, {%6, %7};\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, da, db, p, 1, 1, "
        "%9, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(ACC), "n"(TA)
        : "memory");
}
template <int ACC, int TA>
__device__ __forceinline__ void wgmma_ss(float (&d)[8], uint32_t a_lo, uint32_t a_hi,
                                         uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %12, 0;\n"
        "mov.b64 da, {%8, %9};\nmov.b64 db, {%10, %11};\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "da, db, p, 1, 1, %13, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(ACC), "n"(TA)
        : "memory");
}
template <int ACC, int TA>
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint32_t a_lo, uint32_t a_hi,
                                         uint32_t b_lo, uint32_t b_hi) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %20, 0;\n"
        "mov.b64 da, {%16, %17};\nmov.b64 db, {%18, %19};\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, da, db, p, 1, 1, %21, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a_lo), "r"(a_hi), "r"(b_lo), "r"(b_hi), "n"(ACC), "n"(TA)
        : "memory");
}
#endif /* MLAKV_SM90A_DEVICE */

#ifdef MLAKV_SM90A_DEVICE
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem)
                 : "memory");
}

/* The producer warps of the narrow-head kernel up to 16 heads (shared memory has room for a raw stage): each warp
 * owns 8 records of every 64-record tile it produces (rows `w0` .. `w0` + 7, side 0 = records
 * 0..31, side 1 = 32..63). PR 1: one pair of warpgroups produces every tile, stage slot t % 2,
 * the raw records of tile t + 2 copied while tile t + 1 is de-quantized. PR 2: pair `pair`
 * produces the tiles of its parity into its own slot; tile t + 2's copies are issued as soon as
 * tile t's records have been read out of the slot, so they stream in during t's
 * de-quantization. Copies: cp.async, one warp instruction per whole record (lane c copies
 * 16-byte chunk c); the indices of the slot's next tile (t + 2) travel in the same cp.async
 * group. Why: with the records in registers (the wide-head kernel's direct gather) ptxas tracks every load of the
 * loop with one scoreboard, so each store waits for the loads issued just before it and loading
 * never overlaps de-quantization; cp.async groups are waited for one by one. The
 * quad layout of the de-quantization (4 threads per record, HeldRecord) is then read
 * from the stage with conflict-free 16-byte loads. */
template <int FMT, int N, int PR>
__device__ __forceinline__ void produce_staged(
    const Params &p, uint8_t *Ks, uint8_t *stg, int32_t *sidx, uint32_t *vk,
    const int32_t *idx_row, int cbeg, int cend, int ntiles, int pair, int side, int wt, int lane) {
    typedef Shape<FMT, N, PR> SH;
    constexpr int NK = SH::NK, REC = SH::REC, CH = REC / 16;
    constexpr int KBUF = (int)SH::KBUF;
    static_assert(SH::STG == 2, "two stage slots (PR 1: by tile parity, PR 2: one per pair)");
    /* the two-level record's token scales, after red_m [2][4][N] and red_l [4][N] (the kernel's
     * `tss`) */
    float *tss = reinterpret_cast<float *>(vk + 16) + 12 * N;
    (void)tss;
    /* E2M1 permute tables, in vector registers with kPinTables */
    constexpr bool SFB = scale_bits(FMT);
    constexpr uint32_t HI_A = SFB ? kE2m1HiA120 : kE2m1HiA;
    uint32_t lut_lo = kE2m1LoA, lut_hi = HI_A;
    if constexpr (kPinTables) e2m1_tables_pinned(lane, p.opaque_zero, lut_lo, lut_hi, HI_A);
    const int part = lane >> 3;
    const int w0 = 32 * side + 8 * (wt >> 5); /* this warp's first record of a tile */
    const int key = w0 + (lane & 7);
    auto slot = [&](int tile) { return PR == 1 ? (tile & 1) : pair; };
    auto rec_at = [&](int s, int u) { return stg + ((size_t)s * NK + w0 + u) * REC; };
    /* cp.async group of `tile`: its records (indices already in the slot's index row) and the
     * indices of tile + 2 (the slot's next tile) into that row; returns the valid bits of the 8 */
    auto issue = [&](int tile) -> uint32_t {
        const int s = slot(tile);
        uint32_t okb = 0;
        if (tile < ntiles) {
            const int myidx = lane < 8 ? sidx[s * NK + w0 + lane] : -1;
            int64_t off;
            const bool ok = record_offset<REC>(p, myidx, off);
            okb = __ballot_sync(0xffffffffu, ok) & 0xFFu;
            const uint32_t olo = (uint32_t)off, ohi = (uint32_t)(off >> 32);
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int64_t offu = (int64_t)__shfl_sync(0xffffffffu, olo, u) |
                                     (int64_t)__shfl_sync(0xffffffffu, ohi, u) << 32;
                if (((okb >> u) & 1u) && lane < CH)
                    cp_async16(rec_at(s, u) + 16 * lane, p.base + offu + 16 * lane);
            }
        }
        __syncwarp(); /* sidx read by lanes 0..7 before the copies below overwrite it */
        if (lane < 8) {
            const int pos = cbeg + (tile + 2) * NK + w0 + lane;
            if (tile + 2 < ntiles && pos < cend) cp_async4(&sidx[s * NK + w0 + lane], idx_row + pos);
            else sidx[s * NK + w0 + lane] = -1;
        }
        cp_async_commit();
        return okb;
    };
    /* tile `tile` into its K buffer; PR 2 issues tile + 2 and returns its valid bits */
    auto put = [&](int tile, uint32_t okb) -> uint32_t {
        const int s = slot(tile);
        cp_async_wait<2 - PR>(); /* this lane's copies of `tile` */
        __syncwarp();                  /* ... and the other lanes' */
        uint8_t *kb = Ks + (tile & 1) * KBUF;
        HeldRecord<FMT> r;
        r.ok = (okb >> (lane & 7)) & 1u;
        const uint8_t *g = rec_at(s, lane & 7);
        fill_record<FMT>(r, part, [&](int o) { return *reinterpret_cast<const uint4 *>(g + o); },
                         [&](int o) { return *reinterpret_cast<const uint2 *>(g + o); });
        uint32_t next = 0;
        if constexpr (PR == 2) {
            __syncwarp(); /* every lane has read the slot before tile + 2's copies into it */
            next = issue(tile + 2);
        }
        if (tile >= 2) bar_sync(kBarEmpty + (tile & 1), kHandshakeThreads);
        dequant_store<FMT, SFB>(r, part, kb, key, lut_lo, lut_hi);
        if constexpr (FMT == 3) { /* the token scale (byte 292) goes to the consumer, not into K */
            if (part == 0) tss[(tile & 1) * NK + key] = r.token_scale();
        }
        if (lane == 0) vk[(tile & 1) * 8 + (key >> 3)] = okb;
        fence_proxy_async(); /* K rows (and Q, first time) to the tensor cores */
        bar_arrive(kBarFull + (tile & 1), kHandshakeThreads);
        __syncwarp(); /* every lane has read the slot before the next copies into it */
        return next;
    };
    /* indices of the first tile of each slot this warp fills (plain loads), then their groups
     * (Q's cp.async, issued before by warpgroup 0, joins the first one) */
    const int t0 = PR == 1 ? 0 : pair;
    if (lane < 8)
#pragma unroll
        for (int j = 0; j < 3 - PR; j++) {
            const int tile = t0 + j, pos = cbeg + tile * NK + w0 + lane;
            sidx[slot(tile) * NK + w0 + lane] = (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
        }
    __syncwarp();
    if constexpr (PR == 1) {
        uint32_t okr[2];
        okr[0] = issue(0);
        okr[1] = issue(1);
        for (int it = 0; it < ntiles; it += 2) {
#pragma unroll
            for (int j = 0; j < 2; j++)
                if (it + j < ntiles) {
                    put(it + j, okr[j]);
                    okr[j] = issue(it + j + 2);
                }
        }
    } else {
        uint32_t okb = issue(t0);
        for (int it = t0; it < ntiles; it += 2) okb = put(it, okb);
    }
    cp_async_wait<0>();
}
#endif /* MLAKV_SM90A_DEVICE */

template <int FMT, int N, int PR = 1, bool SC = false>
__global__ void __launch_bounds__(Shape<FMT, N, PR>::THREADS, 1)
    kernel(const Params p) {
#ifdef MLAKV_SM90A_DEVICE
    typedef Shape<FMT, N, PR> SH;
    constexpr int NK = SH::NK, NC = N / 4; /* columns per thread: 8i + 2q + e, i < N / 8 */
    constexpr int KBUF = (int)SH::KBUF;
    constexpr int P_OFF = 8 * NK * 128; /* P^T [N x 64]: the RoPE block, dead once S has read it */

    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *Qs = smem;
    uint8_t *Ks = Qs + SH::Q_BYTES;
    uint8_t *stg = Ks + 2 * SH::KBUF;                                /* [STG][64] raw records */
    int32_t *sidx = reinterpret_cast<int32_t *>(stg + (size_t)SH::STG * NK * SH::REC); /* [STG][64] */
    uint32_t *vk = reinterpret_cast<uint32_t *>(stg + SH::STAGE);    /* [2][8] record-valid bits */
    float *red_m = reinterpret_cast<float *>(vk + 16);              /* [2][4][N] */
    float *red_l = red_m + 2 * 4 * N;                               /* [4][N] */
    float *tss = red_l + 4 * N; /* [2][NK] token scales of the two-level record (FMT 3) */
    (void)tss;

    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wt = tid & 127;
    const int bt = blockIdx.x, split = blockIdx.z;
    const int b = bt / p.s_q, t = bt - b * p.s_q;

    int cbeg, cend, ntiles;
    split_range<NK, NK>(p, b, split, cbeg, cend, ntiles);

    if (wg != 1) {
        /* ============ producers: warpgroup 0 records 0..31, warpgroup 2 records 32..63 of every
         * tile (PR 2: of the even tiles; warpgroups 3 and 4 those of the odd tiles) ============ */
        set_regs<PR == 2 ? kPairsProducerRegs : producer_regs(N), SH::CAP>();
        const int32_t *idx_row = p.indices + (int64_t)b * p.i_sb + (int64_t)t * p.i_st;
        const int part = lane >> 3; /* 16-byte column of the record's parts */
        const int key = (wg == 2 ? 32 : 0) + 8 * (wt >> 5) + (lane & 7);
        auto load_idx = [&](int tile) -> int {
            const int pos = cbeg + tile * NK + key;
            return (tile < ntiles && pos < cend) ? __ldg(idx_row + pos) : -1;
        };
        auto fetch = [&](HeldRecord<FMT> &r, int tile, int idx) {
            if (tile < ntiles) load_record<FMT>(p, idx, part, r);
        };
        auto put = [&](const HeldRecord<FMT> &r, int tile) {
            if (tile >= 2) bar_sync(kBarEmpty + (tile & 1), kHandshakeThreads);
            dequant_store<FMT, scale_bits(FMT)>(r, part, Ks + (tile & 1) * KBUF, key);
            if constexpr (FMT == 3) {
                if (part == 0) tss[(tile & 1) * NK + key] = r.token_scale();
            }
            const uint32_t okb = __ballot_sync(0xffffffffu, r.ok) & 0xFFu; /* lanes 0..7: part 0 */
            if (lane == 0) vk[(tile & 1) * 8 + (key >> 3)] = okb;
            fence_proxy_async(); /* K rows (and Q, first time) to the tensor cores */
            bar_arrive(kBarFull + (tile & 1), kHandshakeThreads);
        };
        if (wg == 0) /* Q [N heads x 576] into nine swizzled 64-column blocks of N rows */
            load_q<N, 128, SC>(p, b, t, 0, wt, [&](int rr, int j) {
                return Qs + (j >> 3) * (N * 128) + sw128(rr, j & 7);
            });
        if constexpr (SH::STG > 0) {
            produce_staged<FMT, N, PR>(p, Ks, stg, sidx, vk, idx_row, cbeg, cend, ntiles,
                                       wg >= 3, wg == 2 || wg == 4, wt, lane);
            return;
        }
        cp_async_commit();
        /* 32 heads: D tiles in flight per thread (records in registers, indices D tiles ahead):
         * the loads of tile it + D are issued right after tile it is stored. ptxas tracks all of
         * them with one scoreboard, so a store waits for every load issued before it (the
         * reason for the staged path above; D = 3 or 4 measured no faster) */
        constexpr int D = stage_depth(N);
        HeldRecord<FMT> r[D];
        int in[D];
#pragma unroll
        for (int j = 0; j < D; j++) in[j] = load_idx(j);
#pragma unroll
        for (int j = 0; j < D; j++) fetch(r[j], j, in[j]);
#pragma unroll
        for (int j = 0; j < D; j++) in[j] = load_idx(D + j);
        cp_async_wait<0>();
        for (int it = 0; it < ntiles; it += D) {
#pragma unroll
            for (int j = 0; j < D; j++)
                if (it + j < ntiles) {
                    put(r[j], it + j);
                    fetch(r[j], it + D + j, in[j]);
                    in[j] = load_idx(it + 2 * D + j);
                }
        }
    } else {
        /* ============ consumer: S^T, softmax over columns, O^T += V^T P^T ============ */
        set_regs<PR == 2 ? kPairsConsumerRegs : consumer_regs(N), SH::CAP>();
        const int warp = wt >> 5, g8 = lane >> 2, q = lane & 3;
        const int r0 = 16 * warp + g8; /* S^T rows r0, r0 + 8: records of the tile */
        float m_run[NC], l_part[NC];
#pragma unroll
        for (int cc = 0; cc < NC; cc++) m_run[cc] = -INFINITY, l_part[cc] = 0.0f;
        float o[8][N / 2]; /* O^T block mb: dims 64 mb + r0 (+ 8), heads 8i + 2q + e */
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int i = 0; i < N / 2; i++) o[mb][i] = 0.0f;
        float s[N / 2];
        /* the two-level record: the RoPE product in its own accumulator, behind the latent
         * chain, so that one wait covers both */
        float s2[FMT == 3 ? N / 2 : 1];
        const uint32_t qs_a = smem_addr(Qs), ks_a = smem_addr(Ks);
        const uint32_t dhi = wgmma_desc_hi(1024);
        /* S^T(i) = K(i) Q^T: one chain of 36 k16 steps (two chains of 18 measured the same) */
        /* k16 steps k0 .. k1 - 1 of S^T(i) into d (step k0 overwrites); the caller fences and
         * commits */
        auto s_steps = [&](auto &d, int i, int k0, int k1) {
            const uint32_t dk0 = wgmma_desc_lo(ks_a + (i & 1) * KBUF, 16);
            const uint32_t dq0 = wgmma_desc_lo(qs_a, 16);
#pragma unroll
            for (int kk = k0; kk < k1; kk++) {
                const uint32_t off_k = ((kk >> 2) * (NK * 128) + (kk & 3) * 32) >> 4;
                const uint32_t off_q = ((kk >> 2) * (N * 128) + (kk & 3) * 32) >> 4;
                if (kk == k0)
                    wgmma_ss<0, 0>(d, dk0 + off_k, dhi, dq0 + off_q, dhi);
                else
                    wgmma_ss<1, 0>(d, dk0 + off_k, dhi, dq0 + off_q, dhi);
            }
        };
        auto s_issue = [&](int i) { /* the two-level record: 32 latent steps into s, 4 RoPE
                                       steps into s2 */
            wgmma_fence();
            s_steps(s, i, 0, FMT == 3 ? 32 : 36);
            if constexpr (FMT == 3) s_steps(s2, i, 32, 36);
            wgmma_commit();
        };
        if (ntiles > 0) {
            bar_sync(kBarFull, kHandshakeThreads);
            s_issue(0);
        }
        for (int it = 0; it < ntiles; ++it) {
            uint8_t *kb = Ks + (it & 1) * KBUF;
            wgmma_wait0(); /* S^T(it) */
            reg_fence(s);
            /* the two-level record: rows (records) times their token scale plus the RoPE
             * product, into a copy that the softmax works on (as in the wide-head kernel, where a non-wgmma
             * write of an accumulator serialized every chain, ptxas C7515) */
            float sv[FMT == 3 ? N / 2 : 1];
            float ts0 = 1.0f, ts1 = 1.0f;
            if constexpr (FMT == 3) {
                reg_fence(s2);
                ts0 = tss[(it & 1) * NK + r0];
                ts1 = tss[(it & 1) * NK + r0 + 8];
#pragma unroll
                for (int i = 0; i < N / 8; i++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int k0 = 4 * i + e, k1 = 4 * i + 2 + e;
                        sv[k0] = fmaf(s[k0], ts0, s2[k0]);
                        sv[k1] = fmaf(s[k1], ts1, s2[k1]);
                    }
            }
            float(&S)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(FMT == 3 ? sv : s);
            /* records r0 / r0 + 8: bit g8 of valid words 2 warp / 2 warp + 1 */
            const uint32_t *vw = vk + (it & 1) * 8 + 2 * warp;
            const bool ok0 = (vw[0] >> g8) & 1u, ok1 = (vw[1] >> g8) & 1u;
            const float c = p.sm_scale_log2;
            float *rm = red_m + (it & 1) * 4 * N;
            float al[NC];
            bool moved = false;
            /* lazy reference maxima (the wide-head kernel's rule, MLAKV_LAZY_RESCALE_LOG2): P is taken against
             * m_run unless some score of the tile exceeds it by more than the threshold in
             * any of the 4 warps (one barrier with an OR reduction); only then are the
             * tile's column maxima exchanged and m_run, l and O rescaled */
            bool mine = false;
#pragma unroll
            for (int i = 0; i < N / 8; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    S[4 * i + e] = ok0 ? S[4 * i + e] * c : -INFINITY;
                    S[4 * i + 2 + e] = ok1 ? S[4 * i + 2 + e] * c : -INFINITY;
                    mine |= fmaxf(S[4 * i + e], S[4 * i + 2 + e]) > m_run[2 * i + e] + MLAKV_LAZY_RESCALE_LOG2;
                }
#pragma unroll
            for (int cc = 0; cc < NC; cc++) al[cc] = 1.0f;
            if (bar_red_or(kBarColumnMax, 128, mine)) { /* the same in all 4 warps */
                col_max_put<N>(S, rm, warp, g8, q);
                bar_sync(kBarColumnMax, 128);
#pragma unroll
                for (int i = 0; i < N / 8; i++) {
                    const float2 mx = col_max4<N>(rm, i, q);
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int cc = 2 * i + e;
                        const float mn = fmaxf(m_run[cc], e ? mx.y : mx.x);
                        al[cc] = ex2(m_run[cc] - (mn == -INFINITY ? 0.0f : mn));
                        moved |= al[cc] != 1.0f;
                        l_part[cc] *= al[cc];
                        m_run[cc] = mn;
                    }
                }
            }
            uint8_t *pt = kb + P_OFF;
#pragma unroll
            for (int i = 0; i < N / 8; i++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int cc = 2 * i + e, h = 8 * i + 2 * q + e;
                    const float mu = m_run[cc] == -INFINITY ? 0.0f : m_run[cc]; /* none valid so far: p = 0 */
                    const float p0 = ex2(S[4 * i + e] - mu), p1 = ex2(S[4 * i + 2 + e] - mu);
                    l_part[cc] += p0 + p1;
                    /* the two-level record: P V takes p times the record's token scale */
                    *reinterpret_cast<__nv_bfloat16 *>(pt + sw128(h, 2 * warp) + 2 * g8) =
                        __float2bfloat16_rn(FMT == 3 ? p0 * ts0 : p0);
                    *reinterpret_cast<__nv_bfloat16 *>(pt + sw128(h, 2 * warp + 1) + 2 * g8) =
                        __float2bfloat16_rn(FMT == 3 ? p1 * ts1 : p1);
                }
            col_rescale<N>(o, al, moved); /* O is idle: P V(it - 1) was waited for */
            fence_proxy_async();
            bar_sync(kBarP, 128); /* P^T complete */
            /* O^T[64 mb .. +64) += V^T P^T: A = column block mb of the K tile (MN-major),
             * k16 step kk = records 16 kk .. +16 (2 KB apart); B = P^T (K-major) */
#pragma unroll
            for (int mb = 0; mb < 8; mb++) reg_fence(o[mb]);
            wgmma_fence();
            {
                const uint32_t kb_a = ks_a + (it & 1) * KBUF;
                const uint32_t dv0 = wgmma_desc_lo(kb_a, NK * 128), dp0 = wgmma_desc_lo(kb_a + P_OFF, 16);
#pragma unroll
                for (int kk = 0; kk < 4; kk++)
#pragma unroll
                    for (int mb = 0; mb < 8; mb++)
                        wgmma_ss<1, 1>(o[mb], dv0 + (uint32_t)((mb * (NK * 128) + kk * 2048) >> 4),
                                       dhi, dp0 + (uint32_t)((kk * 32) >> 4), dhi);
            }
            wgmma_commit();
            wgmma_wait0();
#pragma unroll
            for (int mb = 0; mb < 8; mb++) reg_fence(o[mb]);
            if (it + 2 < ntiles) bar_arrive(kBarEmpty + (it & 1), kHandshakeThreads);
            if (it + 1 < ntiles) {
                bar_sync(kBarFull + ((it + 1) & 1), kHandshakeThreads);
                s_issue(it + 1);
            }
        }
        wgmma_wait0(); /* nothing in flight; said here, on the uniform path */

        /* column sums over the 64 rows: g8 by shuffles, the 4 warps through shared memory */
        col_sum_put<N>(l_part, red_l, warp, g8, q);
        bar_sync(kBarColumnMax, 128);
        const int64_t rows = (int64_t)p.batch * p.s_q;
#pragma unroll
        for (int i = 0; i < N / 8; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int cc = 2 * i + e, h = 8 * i + 2 * q + e;
                if (h >= p.heads) continue;
                const float l = col_sum4<N>(red_l, h);
                float so, lse;
                if (p.nsplit == 1) {
                    norm_out<SC>(p, h, m_run[cc], l, so, lse);
                    __nv_bfloat16 *orow = p.out + ((int64_t)bt * p.heads + h) * kVDim + r0;
#pragma unroll
                    for (int mb = 0; mb < 8; mb++) {
                        orow[64 * mb] = __float2bfloat16_rn(o[mb][4 * i + e] * so);
                        orow[64 * mb + 8] = __float2bfloat16_rn(o[mb][4 * i + 2 + e] * so);
                    }
                    if (wt < 4) p.lse[(int64_t)bt * p.heads + h] = lse;
                } else {
                    norm_part<SC>(p, m_run[cc], l, so, lse);
                    const int64_t prow = ((int64_t)split * rows + bt) * p.heads + h;
                    float *orow = p.part_o + prow * kVDim + r0;
#pragma unroll
                    for (int mb = 0; mb < 8; mb++) {
                        orow[64 * mb] = o[mb][4 * i + e] * so;
                        orow[64 * mb + 8] = o[mb][4 * i + 2 + e] * so;
                    }
                    if (wt < 4) p.part_lse[prow] = lse;
                }
            }
    }
#endif /* MLAKV_SM90A_DEVICE */
}

/* heads <= 32 on sm_90a: N = 8, 16 or 32 columns; grid (query rows, 1, splits), one CTA per SM
 * (the dispatch table's plan for this kernel). SC: the variant that applies a latent scale. */
template <int FMT, int N, int PR, bool SC>
static cudaError_t launch_heads_sc(const Params *p, cudaStream_t stream) {
    typedef Shape<FMT, N, PR> SH;
    const size_t sm = SH::SMEM;
    cudaError_t err = cudaFuncSetAttribute(kernel<FMT, N, PR, SC>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (err != cudaSuccess) return err;
    dim3 grid((unsigned)(p->batch * p->s_q), 1, (unsigned)p->nsplit);
    return launch_pdl(kernel<FMT, N, PR, SC>, grid, dim3(SH::THREADS),
                      sm, stream, p);
}

template <int FMT, int N, int PR = 1>
static cudaError_t launch_heads(const Params *p, cudaStream_t stream) {
    if constexpr (FMT == 1 || FMT == 2) /* the static NVFP4 records with a latent scale */
        if (p->q_rope_scaled) return launch_heads_sc<FMT, N, PR, true>(p, stream);
    return launch_heads_sc<FMT, N, PR, false>(p, stream);
}

/* pairs: producer pairs, 1 or 2 (2 exists up to 16 heads; at 32 heads it runs 1) */
template <int FMT>
static cudaError_t launch(const Params *p, int pairs,
                          cudaStream_t stream) {
    if (pairs == 2) {
        if (p->heads <= 8) return launch_heads<FMT, 8, 2>(p, stream);
        if (p->heads <= 16) return launch_heads<FMT, 16, 2>(p, stream);
    }
    if (p->heads <= 8) return launch_heads<FMT, 8>(p, stream);
    if (p->heads <= 16) return launch_heads<FMT, 16>(p, stream);
    if (p->heads <= 32) return launch_heads<FMT, 32>(p, stream);
    return cudaErrorInvalidValue;
}

} // namespace mlakv::decode::narrow

#endif
